// stream_* with the official MCP TypeScript SDK client (docs/roadmap.md):
//
//   node ts-stream.mjs URL TOOL COUNT     MCP_BEARER=token for an authenticated endpoint
//
// Calls TOOL (a stream_*), collects COUNT notifications/resources/updated for
// the resource it answers, and checks them: each carries the reading in
// _meta["physmcp/reading"] valid against the reading's read_* outputSchema,
// no two were measured closer than the answered interval_ms, they arrive at
// the declared rate on average, and none moved by no more than the deadband
// from the one before. Then it
// unsubscribes and checks that the updates stop. Exit 0 only when all pass.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const [url, name, countArg] = process.argv.slice(2);
const count = Number(countArg);
if (!url || !name || !(count > 0)) {
  console.error('usage: node ts-stream.mjs URL TOOL COUNT');
  process.exit(2);
}
const fails = [];
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) fails.push(what);
  return ok;
};
const short = (v) => JSON.stringify(v)?.slice(0, 300);

const transport = new StreamableHTTPClientTransport(new URL(url), process.env.MCP_BEARER
  ? { requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_BEARER}` } } } : {});
const client = new Client({ name: 'physmcpd-stream', version: '1.0.0' }, { capabilities: {} });
const updates = [];
let waiting = null;
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push({ at: performance.now(), uri: n.params.uri, reading: n.params._meta?.['physmcp/reading'] });
  if (waiting && updates.length >= waiting.n) waiting.resolve();
});
await client.connect(transport);

const { tools } = await client.listTools();
const tool = tools.find((t) => t.name === name);
const read = tools.find((t) => t.name === 'read_' + name.slice('stream_'.length));
check(!!tool && !!read, `${name} and its read_* are listed`);
check(tool?.annotations?.readOnlyHint === true, `${name} is read-only`);
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
const validStream = ajv.compile(tool.outputSchema);
const validReading = ajv.compile(read.outputSchema);

const res = await client.callTool({ name, arguments: {} });
const sub = res.structuredContent;
check(res.isError !== true && sub?.status === 'subscribed', `${name} subscribed: ${short(sub)}`);
check(validStream(sub), `the answer is valid against ${name}'s outputSchema ${validStream.errors ? short(validStream.errors) : ''}`);
check(validReading(sub.first), `first is a ${read.name} body ${validReading.errors ? short(validReading.errors) : ''}`);
const { resource_uri: uri, interval_ms: interval, deadband } = sub;

const started = performance.now();
await Promise.race([
  new Promise((resolve) => { waiting = { n: count, resolve }; if (updates.length >= count) resolve(); }),
  new Promise((resolve) => setTimeout(resolve, count * interval * 6 + 5000)),
]);
const got = updates.filter((u) => u.uri === uri).slice(0, count);
check(got.length >= count, `${got.length} updates of ${uri} (want ${count})`);
check(got.every((u) => validReading(u.reading)), `every update carries a ${read.name} body`);
// The pace is judged by when each reading was measured (its timestamp), which
// the server controls; arrival times also carry the jitter of two busy
// processes and an SSE stream, so they only give the mean rate.
const measured = got.map((u) => Date.parse(u.reading.timestamp));
const gaps = measured.slice(1).map((t, i) => t - measured[i]);
const minGap = Math.min(...gaps);
const meanGap = (got.at(-1).at - got[0].at) / Math.max(1, got.length - 1);
check(minGap >= interval, `no two updates measured closer than interval_ms ${interval}: the closest ${minGap} ms apart`);
check(meanGap <= interval * 3, `updates keep the declared rate (${sub.rate_hz} Hz at most): mean gap on arrival ${meanGap.toFixed(0)} ms`);
let prev = sub.first.value;
let inside = 0;
for (const u of got) {
  if (typeof prev === 'number' && typeof u.reading.value === 'number' && Math.abs(u.reading.value - prev) <= deadband) inside++;
  prev = u.reading.value;
}
check(inside === 0, `no update within the deadband ${deadband} of the one before (${inside} were)`);
console.log(`values: ${got.map((u) => u.reading.value).join(', ')} (${((performance.now() - started) / 1000).toFixed(1)} s)`);

await client.unsubscribeResource({ uri });
const after = updates.length;
await new Promise((resolve) => setTimeout(resolve, interval * 4));
check(updates.length <= after + 1, `updates stop after resources/unsubscribe (${updates.length - after} came after)`);

await client.close();
if (fails.length) {
  console.log(`${fails.length} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');

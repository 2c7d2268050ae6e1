// The official MCP TypeScript SDK client against physmcpd.
//
//   node ts-client.mjs stdio CMD ARGS...      e.g. physmcpd serve --manifest M --policy P --simulate
//   node ts-client.mjs http URL               MCP_BEARER=token for an authenticated endpoint
//
// Lists the tools, validates every structuredContent against its tool's
// outputSchema with Ajv (the SDK validates too), and runs the proMCP loop
// can_do -> read_* -> do_* -> read_* (plus a retry with the same key) on every
// do_* tool can_do allows. Reads the resources, subscribes to the reading a
// do_* changes and waits for its update, and sets the log level to see a
// failed call's log message. Prints one line per check; exit 0 only when all pass.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { randomUUID } from 'node:crypto';

const [mode, target, ...rest] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !target) {
  console.error('usage: node ts-client.mjs stdio CMD ARGS... | http URL');
  process.exit(2);
}
const fails = [];
let passed = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (ok) passed++; else fails.push(what);
  return ok;
};
const short = (v) => JSON.stringify(v)?.slice(0, 300);

const transport = mode === 'stdio'
  // The SDK passes only a whitelisted environment to the child by default.
  ? new StdioClientTransport({ command: target, args: rest, stderr: 'inherit', env: { ...process.env } })
  : new StreamableHTTPClientTransport(new URL(target), process.env.MCP_BEARER
    ? { requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_BEARER}` } } } : {});
const client = new Client({ name: 'physmcpd-interop', version: '1.0.0' }, { capabilities: {} });
await client.connect(transport);
const info = client.getServerVersion();
check(info?.name === 'physmcpd', `connected over ${mode} to ${info?.name} ${info?.version}`);
const about = client.getServerCapabilities()?.experimental?.promcp;
check(!!about?.promcp_base && !!about?.device_id, `serverInfo declares promcp ${short(about)}`);

const { tools } = await client.listTools();
console.log(`tools: ${tools.map((t) => t.name).join(', ')}`);
check(tools.every((t) => /^(read_|do_)[a-z0-9_]+$|^can_do$/.test(t.name)), 'every tool is read_*, do_* or can_do');
check(tools.filter((t) => t.name === 'can_do').length === 1, 'exactly one can_do');
check(tools.every((t) => t.inputSchema?.type === 'object' && t.outputSchema?.type === 'object'), 'every tool has an input and an output object schema');
check(tools.every((t) => typeof t.annotations?.readOnlyHint === 'boolean'), 'every tool has explicit annotations');

// Notifications: resource updates by URI, log messages in order.
const updated = new Map();
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.get(n.params.uri)?.(n.params));
const logs = [];
let logWaiter;
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params); logWaiter?.(); });
const within = (ms, promise, what) => Promise.race([promise, new Promise((_, no) => setTimeout(() => no(new Error(`${what}: nothing within ${ms} ms`)), ms))]);

// Resources: the device and each reading.
const caps = client.getServerCapabilities();
check(caps?.resources?.subscribe === true && caps?.logging !== undefined, `resources (subscribe) and logging declared ${short({ resources: caps?.resources, logging: caps?.logging })}`);
const { resources } = await client.listResources();
console.log(`resources: ${resources.map((r) => r.uri).join(', ')}`);
const deviceRes = resources.find((r) => /^physmcp:\/\/[^/]+\/device$/.test(r.uri));
check(!!deviceRes, 'the device resource is listed');
const dev = JSON.parse((await client.readResource({ uri: deviceRes.uri })).contents[0].text);
check(dev.device_id === about.device_id && Array.isArray(dev.capabilities), `device resource: ${dev.device_id}, ${dev.capabilities.length} capabilities, profile ${dev.profile}`);
const readingURI = (name) => resources.find((r) => r.uri.endsWith(`/readings/${name}`))?.uri;
check(tools.filter((t) => t.name.startsWith('read_')).every((t) => readingURI(t.name.slice(5))), 'every read_* has its reading resource');

const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
const validators = new Map(tools.map((t) => [t.name, ajv.compile(t.outputSchema)]));
const tool = (name) => tools.find((t) => t.name === name);

// call validates structuredContent against the tool's outputSchema and the
// text block against structuredContent.
async function call(name, args, what) {
  const res = await client.callTool({ name, arguments: args });
  const body = res.structuredContent;
  const valid = validators.get(name);
  check(body !== undefined && valid(body), `${what}: structuredContent valid against ${name}'s outputSchema ${valid.errors ? short(valid.errors) : ''}`);
  check(JSON.stringify(JSON.parse(res.content?.[0]?.text ?? 'null')) === JSON.stringify(body), `${what}: text content mirrors structuredContent`);
  return { body: body ?? {}, isError: res.isError === true };
}

for (const t of tools.filter((t) => t.name.startsWith('read_'))) {
  const { body } = await call(t.name, {}, t.name);
  check(['good', 'stale', 'degraded', 'error'].includes(body.quality), `${t.name} quality ${body.quality}, value ${short(body.value)} ${body.unit ?? ''}`);
}

const same = (a, b) => (typeof a === 'number' && typeof b === 'number' ? Math.abs(a - b) < 1e-6 : JSON.stringify(a) === JSON.stringify(b));

// pick chooses a value other than current that the candidate allows.
function pick(doTool, candidate, current) {
  const v = doTool.inputSchema.properties.value;
  const c = candidate.constraints ?? {};
  if (v.type === 'boolean') return !current;
  if (v.enum) return v.enum.find((x) => x !== current) ?? v.enum[0];
  const min = c.min ?? v.minimum ?? 0;
  const max = c.max ?? v.maximum ?? min + 10;
  for (const f of [0.4, 0.6]) {
    let x = min + (max - min) * f;
    x = v.type === 'integer' ? Math.round(x) : Math.round(x * 10) / 10;
    if (!same(x, current)) return x;
  }
  return min;
}

let loops = 0;
let subscribed = false;
for (const doTool of tools.filter((t) => t.name.startsWith('do_'))) {
  const subject = doTool.name.slice(3);
  // 1. can_do; a block that clears within 15 s (a cooldown) is waited out, as an agent would.
  const intent = { intent: { semantic_tags: subject.split('_'), action: 'set', target: subject } };
  let { body: report } = await call('can_do', intent, `can_do for ${doTool.name}`);
  const wait = Date.parse(report.blocked?.find((b) => b.capability === doTool.name)?.clears_at ?? '') - Date.now();
  if (wait > 0 && wait < 15000) {
    console.log(`waiting ${wait} ms for ${doTool.name}'s block to clear`);
    await new Promise((r) => setTimeout(r, wait + 100));
    ({ body: report } = await call('can_do', intent, `can_do for ${doTool.name} after the wait`));
  }
  check(report.candidates.every((c) => !!c.valid_until && c.confidence >= 0 && c.confidence <= 1), `can_do for ${doTool.name}: every candidate has valid_until and a confidence`);
  check(report.candidates.concat(report.blocked).every((c) => tool(c.capability)), `can_do for ${doTool.name}: names only tools this endpoint serves`);
  const cand = report.candidates.find((c) => c.capability === doTool.name && c.permission === 'allowed');
  if (!cand) {
    const why = report.candidates.concat(report.blocked).find((c) => c.capability === doTool.name);
    console.log(`skip loop on ${doTool.name}: can_do says ${why ? why.permission : short(report.unroutable)}`);
    continue;
  }
  // 2. read
  const readTool = tool(`read_${subject}`);
  let before;
  if (readTool) before = (await call(readTool.name, {}, `read before ${doTool.name}`)).body.value;
  const value = pick(doTool, cand, before);
  // The first do_* with a reading of its own: subscribe to the reading; the write must notify.
  const subURI = readTool && !subscribed && readingURI(subject);
  let update;
  if (subURI) {
    subscribed = true;
    update = new Promise((resolve) => updated.set(subURI, resolve));
    await client.subscribeResource({ uri: subURI });
  }
  // 3. do, then the same call again with the same key
  const key = randomUUID();
  const { body: done, isError } = await call(doTool.name, { value, idempotency_key: key }, `${doTool.name} value=${value}`);
  if (subURI) {
    const got = await within(10000, update, `resource update of ${subURI}`).catch((e) => ({ error: e.message }));
    const reading = got?._meta?.['physmcp/reading'];
    check(same(reading?.value, done.applied_value) && reading?.quality === 'good', `resource update: ${subURI} -> ${short(reading?.value)} ${got.error ?? ''}`);
    await client.unsubscribeResource({ uri: subURI });
    updated.delete(subURI);
  }
  check(!isError && ['success', 'partial'].includes(done.status) && done.idempotency_key === key,
    `${doTool.name} value=${value}: status ${done.status}, applied ${short(done.applied_value)}, previous ${short(done.previous_value)} ${done.reason ?? ''}`);
  if (readTool) check(same(done.previous_value, before), `${doTool.name}: previous_value matches the read before`);
  check(typeof done.compensable === 'boolean' && (!done.compensable || typeof done.compensation_hint === 'string'), `${doTool.name}: compensable ${done.compensable}, hint ${short(done.compensation_hint)}`);
  const { body: again } = await call(doTool.name, { value, idempotency_key: key }, `${doTool.name} retried with the same key`);
  check(again.status === done.status && same(again.applied_value, done.applied_value) && same(again.previous_value, done.previous_value) && again.timestamp === done.timestamp,
    `${doTool.name}: a retry with the same key returns the first outcome`);
  // 4. read to verify
  if (readTool) {
    const { body: after } = await call(readTool.name, {}, `read after ${doTool.name}`);
    check(same(after.value, done.applied_value), `${readTool.name} now reads ${short(after.value)} = applied ${short(done.applied_value)}`);
  }
  loops++;
}
if (tools.some((t) => t.name.startsWith('do_'))) check(loops > 0, `ran the can_do -> read -> do -> read loop on ${loops} do_* tool(s)`);
if (tools.some((t) => t.name.startsWith('do_') && tool(`read_${t.name.slice(3)}`))) check(subscribed, 'subscribed to a reading a do_* changes');

// A failed call is also told as a log message once the client asks for warnings.
const refusable = tools.find((t) => t.name.startsWith('do_') && typeof t.inputSchema.properties.value.maximum === 'number');
if (refusable) {
  await client.setLoggingLevel('warning');
  const logged = new Promise((resolve) => { logWaiter = resolve; });
  const tooHigh = refusable.inputSchema.properties.value.maximum + 1000;
  const { body: refused } = await call(refusable.name, { value: tooHigh }, `${refusable.name} value=${tooHigh}`);
  await within(5000, logged, 'log message').catch(() => {});
  const msg = logs.find((m) => m.data?.tool === refusable.name);
  check(refused.status === 'failed' && msg?.level === 'warning' && msg?.logger === 'physmcpd' && msg?.data?.event === 'call_failed' && msg?.data?.permission === refused.permission,
    `log message for the refused ${refusable.name}: ${short(msg)}`);
}

// Refusals come back as proMCP bodies, not protocol errors.
const bad = await client.callTool({ name: 'can_do', arguments: { intent: { semantic_tags: [] } } });
check(bad.structuredContent?.feasible === false && bad.structuredContent?.unroutable?.[0]?.reason === 'malformed_request', `malformed can_do -> unroutable malformed_request`);
const unknown = await client.callTool({ name: 'do_no_such_thing', arguments: {} }).then((r) => r, (e) => ({ thrown: e.message }));
check(!!unknown.thrown || unknown.isError === true, `unknown tool refused (${short(unknown.thrown ?? unknown.content)})`);

await client.close();
console.log(`${passed} passed, ${fails.length} failed`);
process.exit(fails.length ? 1 : 0);

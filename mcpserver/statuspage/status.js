// The physmcpd status page: asks for the token once, keeps it in this tab's
// sessionStorage, and polls /status/api with it in the Authorization header.
// Everything shown is set as text, never parsed as HTML.
'use strict';

const TOKEN = 'physmcpd.status.token';
const API = '/status/api';
const EVERY_MS = 1500;
let timer = null;

const $ = (id) => document.getElementById(id);

function show(id, on) { $(id).hidden = !on; }

function cell(text, cls) {
  const td = document.createElement('td');
  td.textContent = text == null ? '' : String(text);
  if (cls) td.className = cls;
  return td;
}

function row(key, cells) {
  const tr = document.createElement('tr');
  if (key) tr.dataset.tool = key;
  for (const c of cells) tr.appendChild(c);
  return tr;
}

function fill(table, rows, empty) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    const td = cell(empty, 'note');
    td.colSpan = $(table).tHead.rows[0].cells.length;
    rows = [row('', [td])];
  }
  body.replaceChildren(...rows);
}

function seconds(ms) {
  if (ms == null) return '';
  if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
  if (ms < 120000) return Math.round(ms / 1000) + ' s';
  return Math.round(ms / 60000) + ' min';
}

function clock(ts) { return ts ? new Date(ts).toLocaleTimeString() : ''; }

function formatValue(v, unit) {
  if (v === null || v === undefined) return '—';
  return unit ? v + ' ' + unit : String(v);
}

const qualityClass = { good: 'good', stale: 'warn', degraded: 'warn', error: 'bad' };

function render(s) {
  $('device').textContent = s.device.id + (s.device.location ? ' — ' + s.device.location : '');
  document.title = s.device.id + ' — physmcpd';
  $('whoami').textContent = 'as ' + s.caller.name + ' (role ' + s.caller.role + ')';

  fill('readings', s.readings.map((r) => row(r.tool, [
    cell(r.tool.replace(/^read_/, '')),
    cell(formatValue(r.value, r.unit), 'value'),
    cell(r.quality + (r.detail ? ': ' + r.detail : ''), 'quality ' + (qualityClass[r.quality] || '')),
    cell(seconds(r.age_ms), 'age'),
  ])), 'No readings this role may see.');

  fill('actions', s.actions.map((a) => row(a.tool, [
    cell(a.tool.replace(/^do_/, '') + (a.requires_human_approval ? ' (needs approval)' : '')),
    cell(a.permission === 'allowed' ? 'ready' : a.permission + (a.reason ? ': ' + a.reason : ''),
      'state ' + (a.permission === 'allowed' ? 'good' : 'warn')),
    cell(a.clears_at ? 'in ' + seconds(a.clears_in_ms) + ' (' + clock(a.clears_at) + ')' : '', 'clears'),
    cell(clock(a.last_write)),
  ])), 'No actions this role may take.');

  fill('buses', s.buses.map((b) => row(b.device, [
    cell(b.device + ' — ' + b.tools.join(', ')),
    cell(b.state + (b.failures ? ' (' + b.failures + ' failures)' : '') + (b.retry_at ? ', retry at ' + clock(b.retry_at) : ''),
      b.state === 'closed' ? 'good' : 'bad'),
    cell(b.last_error || ''),
  ])), 'No buses behind the tools this role may see.');

  $('audit-note').textContent = !s.audit.kept
    ? 'No audit trail is kept (audit.enabled is off, or the daemon runs without a state directory).'
    : (s.audit.error || 'The latest lines, newest first.');
  fill('audit', s.audit.lines.slice().reverse().map((l) => {
    const refused = ['refused', 'rejected', 'failed', 'in_doubt'].includes(l.outcome);
    const what = l.tool ? l.tool + (l.arguments && 'value' in l.arguments ? ' = ' + JSON.stringify(l.arguments.value) : '')
      : (l.event || l.override_event || '');
    return row(l.tool || '', [
      cell(clock(l.time)),
      cell(l.caller || l.name || ''),
      cell(what),
      cell((l.outcome || l.status || '') + (l.permission ? ' (' + l.permission + ')' : ''), 'outcome ' + (refused ? 'bad' : '')),
      cell(l.reason || l.detail || ''),
    ]);
  }), s.audit.kept ? 'No audit lines this role may see.' : '');

  show('approvals-section', s.approvals.length > 0);
  fill('approvals', s.approvals.map((a) => row(a.tool, [
    cell(a.tool.replace(/^do_/, '')),
    cell(a.caller),
    cell(JSON.stringify(a.previous_value) + ' → ' + JSON.stringify(a.value), 'value'),
    cell('in ' + seconds(a.expires_in_ms) + ' (' + clock(a.expires_at) + ')', 'expires'),
  ])), '');

  show('not-served-section', s.not_served.length > 0);
  fill('not-served', s.not_served.map((n) => row(n.tool, [
    cell(n.tool),
    cell(n.device),
    cell(n.reason),
  ])), '');

  show('policy-unmatched-section', s.policy_unmatched.length > 0);
  fill('policy-unmatched', s.policy_unmatched.map((name) => row('', [cell(name)])), '');

  $('updated').textContent = 'Updated ' + clock(s.time) + ', every ' + EVERY_MS / 1000 + ' s.';
}

function showLogin(message) {
  clearTimeout(timer);
  show('status', false);
  show('logout', false);
  show('login', true);
  $('login-error').textContent = message || '';
  $('token').focus();
}

function showError(message) {
  $('error').textContent = message;
  show('error', !!message);
}

async function poll() {
  clearTimeout(timer);
  const token = sessionStorage.getItem(TOKEN);
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  let resp, status;
  try {
    resp = await fetch(API, { headers, cache: 'no-store', credentials: 'omit' });
    if (resp.status === 401) {
      sessionStorage.removeItem(TOKEN);
      showLogin(token ? 'The device refused this token.' : '');
      return;
    }
    if (!resp.ok) throw new Error('it answered ' + resp.status);
    status = await resp.json();
  } catch (err) {
    showError('No status from the device (' + err.message + '); trying again.');
    timer = setTimeout(poll, EVERY_MS);
    return;
  }
  showError('');
  show('login', false);
  show('status', true);
  show('logout', !!token);
  render(status);
  timer = setTimeout(poll, EVERY_MS);
}

$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const token = $('token').value.trim();
  $('token').value = '';
  if (token) sessionStorage.setItem(TOKEN, token);
  poll();
});

$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN);
  showLogin('');
});

poll();

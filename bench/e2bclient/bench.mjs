// Times, from one Node process, E2B SDK create → first command finished
// against airlock's native session API (open → exec) over HTTP, and
// against the same two E2B calls made with plain fetch (no SDK): the same
// command on the same warm tool, interleaved; prints the times in ms as
// JSON. The raw calls separate the server's E2B path from the SDK's own
// client-side cost; the client's own CPU time (getrusage, through
// process.cpuUsage) for each path shows how much of it is the SDK's work
// in this process. Env: E2B_SDK, E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY,
// NATIVE_URL, N.
const { Sandbox } = await import(process.env.E2B_SDK);
const n = Number(process.env.N || 100);
const key = process.env.E2B_API_KEY;
const native = process.env.NATIVE_URL;
const argv = ['/bin/bash', '-l', '-c', 'true']; // what the SDK runs for 'true'
const hdr = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
async function refilled() {
  for (;;) {
    const pools = await (await fetch(`${native}/v1/pools`, { headers: hdr })).json();
    const p = pools.find((x) => x.name === 'warm');
    if (p && p.idle >= 2) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}
const cpu = { e2b: [], native: [], raw: [] };
let c0;
const cpuSince = () => { const c = process.cpuUsage(c0); return (c.user + c.system) / 1000; };
async function viaE2B() {
  c0 = process.cpuUsage();
  const t0 = performance.now();
  const sbx = await Sandbox.create('warm');
  await sbx.commands.run('true');
  const t = performance.now() - t0;
  cpu.e2b.push(cpuSince());
  await sbx.kill();
  return t;
}
async function viaRaw() {
  const base = process.env.E2B_API_URL;
  c0 = process.cpuUsage();
  const t0 = performance.now();
  const sb = await (await fetch(`${base}/v2/sandboxes`, { method: 'POST', headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' }, body: JSON.stringify({ templateID: 'warm' }) })).json();
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'true'] }, stdin: false }));
  const env = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), msg]); env.writeUInt32BE(msg.length, 1);
  const r = await fetch(`${base}/process.Process/Start`, { method: 'POST', headers: { 'E2b-Sandbox-Id': sb.sandboxID, 'X-Access-Token': sb.envdAccessToken, 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' }, body: env });
  await r.arrayBuffer();
  const t = performance.now() - t0;
  cpu.raw.push(cpuSince());
  await fetch(`${base}/sandboxes/${sb.sandboxID}`, { method: 'DELETE', headers: { 'X-API-KEY': key } });
  return t;
}
async function viaNative() {
  c0 = process.cpuUsage();
  const t0 = performance.now();
  const s = await (await fetch(`${native}/v1/sessions`, { method: 'POST', headers: hdr, body: JSON.stringify({ tool: 'warm' }) })).json();
  const r = await (await fetch(`${native}/v1/sessions/${s.id}/exec`, { method: 'POST', headers: hdr, body: JSON.stringify({ argv }) })).json();
  const t = performance.now() - t0;
  cpu.native.push(cpuSince());
  if (r.outcome !== 'exited' || r.exit_code !== 0) throw new Error(`native exec: ${JSON.stringify(r)}`);
  await fetch(`${native}/v1/sessions/${s.id}`, { method: 'DELETE', headers: hdr });
  return t;
}
const out = { e2b: [], native: [], raw: [] };
for (let i = 0; i < 5; i++) { await refilled(); await viaE2B(); await refilled(); await viaNative(); } // warm-up
for (const k in cpu) cpu[k] = [];
for (let i = 0; i < n; i++) {
  const order = i % 2 ? [['e2b', viaE2B], ['native', viaNative], ['raw', viaRaw]] : [['raw', viaRaw], ['native', viaNative], ['e2b', viaE2B]];
  for (const [k, f] of order) {
    await refilled();
    out[k].push(await f());
  }
}
console.log(JSON.stringify({ ...out, cpu }));

// ComputeSDK's method through the official E2B JS SDK, and the same
// through airlock's native session API with fetch: create → first command
// (`python3 -V`) finished, one at a time or k at once (Promise.all of k
// create + run, each timed on its own). A worker: it reads one request a
// line on stdin ("one e2b", "one native", "burst e2b 100", "burst native
// 100") and answers each with one JSON line on stdout: {ms} for one, {ms:
// [...], errors: [...], wall, kill} for a burst (times in ms, wall from
// the first create to the last command finished, kill the teardown
// after, untimed in ms). The driver (bench/sdk.go) lets the pool refill
// between requests. Env: E2B_SDK, E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY, NATIVE_URL, TOOL.
import { createInterface } from 'node:readline';

const { Sandbox } = await import(process.env.E2B_SDK);
const key = process.env.E2B_API_KEY;
const native = process.env.NATIVE_URL;
const tool = process.env.TOOL;
const hdr = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
const argv = ['/bin/bash', '-l', '-c', 'python3 -V']; // what the SDK runs for 'python3 -V'

function checkVersion(out, err) {
  if (!/^Python 3\./.test(out)) throw new Error(`python3 -V exited 0 but its stdout was ${JSON.stringify(out)} (stderr ${JSON.stringify(err)})`);
}

// Each returns [ms, teardown].
async function viaE2B() {
  const t0 = performance.now();
  const sbx = await Sandbox.create(tool);
  const r = await sbx.commands.run('python3 -V');
  const t = performance.now() - t0;
  if (!/^Python 3\./.test(r.stdout)) await sbx.kill();
  checkVersion(r.stdout, r.stderr);
  return [t, () => sbx.kill()];
}

async function nativeCall(path, body) {
  const r = await fetch(`${native}${path}`, { method: 'POST', headers: hdr, body: JSON.stringify(body) });
  const v = await r.json();
  if (!r.ok) throw new Error(`${r.status} ${v.code}: ${v.message ?? v.error}`);
  return v;
}

async function viaNative() {
  const t0 = performance.now();
  const s = await nativeCall('/v1/sessions', { tool });
  const r = await nativeCall(`/v1/sessions/${s.id}/exec`, { argv });
  const t = performance.now() - t0;
  const kill = () => fetch(`${native}/v1/sessions/${s.id}`, { method: 'DELETE', headers: hdr });
  if (r.outcome !== 'exited' || r.exit_code !== 0) {
    await kill();
    throw new Error(`exec: ${r.outcome} ${r.exit_code} ${r.error ?? ''}`);
  }
  if (!/^Python 3\./.test(r.stdout)) await kill();
  checkVersion(r.stdout, r.stderr);
  return [t, kill];
}

const paths = { e2b: viaE2B, native: viaNative };
const why = (e) => `${e?.name ?? 'Error'}: ${e?.message ?? e}`;

async function one(f) {
  const [ms, kill] = await f();
  await kill();
  return { ms };
}

async function burst(f, k) {
  const t0 = performance.now();
  const got = await Promise.all(Array.from({ length: k }, async () => {
    const s = performance.now();
    try {
      const [ms, kill] = await f();
      return { ms, kill, end: performance.now() };
    } catch (e) {
      return { error: why(e), ms: performance.now() - s, end: performance.now() };
    }
  }));
  const wall = Math.max(...got.map((g) => g.end)) - t0;
  const k0 = performance.now();
  await Promise.all(got.filter((g) => g.kill).map((g) => g.kill().catch(() => {})));
  return {
    ms: got.filter((g) => !g.error).map((g) => g.ms),
    errors: got.filter((g) => g.error).map((g) => ({ error: g.error, ms: g.ms })),
    wall,
    kill: performance.now() - k0,
  };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const [what, path, k] = line.trim().split(/\s+/);
  let out;
  try {
    out = what === 'burst' ? await burst(paths[path], Number(k)) : await one(paths[path]);
  } catch (e) {
    out = { error: why(e) };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

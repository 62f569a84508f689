// Times E2B's code interpreter through the official @e2b/code-interpreter
// SDK, from one Node process: runCode('1+1') in a warm context against
// commands.run('true') on the same sandbox, and against the same
// /execute call made with plain fetch (no SDK); then create → first
// runCode finished against create → first commands.run('true'), on a
// warm tool whose pooled sandboxes start their Python kernel ahead, the
// pool let refill before each. Prints the times in ms as JSON. Env:
// E2B_CI_SDK, E2B_API_URL, E2B_API_KEY, NATIVE_URL, N.
const { Sandbox } = await import(process.env.E2B_CI_SDK);
const n = Number(process.env.N || 100);
const key = process.env.E2B_API_KEY;
const native = process.env.NATIVE_URL;
const hdr = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
async function refilled() {
  for (;;) {
    const pools = await (await fetch(`${native}/v1/pools`, { headers: hdr })).json();
    const p = pools.find((x) => x.name === 'ci');
    if (p && p.idle >= 2) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}
const time = async (f) => { const t0 = performance.now(); await f(); return performance.now() - t0; };
const check = (ex) => { if (ex.error || ex.results[0]?.text !== '2') throw new Error(`runCode: ${JSON.stringify(ex)}`); };

// Warm: one sandbox, its default context running.
await refilled();
const sbx = await Sandbox.create('ci');
const base = process.env.E2B_API_URL;
async function raw() {
  const r = await fetch(`${base}/execute`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken }, body: JSON.stringify({ code: '1+1' }) });
  const text = await r.text();
  if (!text.includes('"text": "2"') && !text.includes('"text":"2"')) throw new Error(`raw execute: ${text}`);
}
for (let i = 0; i < 20; i++) { check(await sbx.runCode('1+1')); await sbx.commands.run('true'); await raw(); }
const warm = { runCode: [], command: [], raw: [] };
for (let i = 0; i < n; i++) {
  const order = i % 2 ? ['runCode', 'command', 'raw'] : ['raw', 'command', 'runCode'];
  for (const k of order) {
    if (k === 'runCode') warm.runCode.push(await time(async () => check(await sbx.runCode('1+1'))));
    if (k === 'command') warm.command.push(await time(() => sbx.commands.run('true')));
    if (k === 'raw') warm.raw.push(await time(raw));
  }
}
await sbx.kill();

// Create → first call finished.
const first = { runCode: [], command: [] };
const m = Math.min(n, 50);
for (let i = 0; i < m + 3; i++) {
  const order = i % 2 ? ['runCode', 'command'] : ['command', 'runCode'];
  for (const k of order) {
    await refilled();
    let s;
    const t = await time(async () => {
      s = await Sandbox.create('ci');
      if (k === 'runCode') check(await s.runCode('1+1'));
      else await s.commands.run('true');
    });
    await s.kill();
    if (i >= 3) first[k].push(t); // the first three are warm-up
  }
}
console.log(JSON.stringify({ warm, first }));
process.exit(0);

// Pause and resume through E2B's JavaScript SDK (its path in E2B_SDK):
// pause then connect, a second pause, auto-pause on timeout then a
// resume on traffic, auto-pause without autoResume then connect, and a
// pause another key cannot see. Prints one JSON line per step for
// TestE2BPauseJS to check.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = async (cond, ms = 10000) => {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) if (await cond()) return true;
  return cond();
};
// A process that counts in its memory and writes its count and pid to
// /tmp/count (whole, by a rename) every 50ms.
const counter = (s) => s.commands.run(`sh -c 'n=0; while :; do n=$((n+1)); echo $n $$ > /tmp/c.new; mv /tmp/c.new /tmp/count; sleep 0.05; done' >/dev/null 2>&1 &`);
const count = async (s) => {
  const [n, pid] = (await s.files.read('/tmp/count')).split(' ');
  return { n: Number(n), pid: pid.trim() };
};
const counted = async (s, above) => { try { return (await count(s)).n > above; } catch { return false; } };

try {
  const sbx = await Sandbox.create('sh', { timeoutMs: 120000 });
  await sbx.files.write('/tmp/kept.txt', 'files survive a pause');
  try { await sbx.pause({ keepMemory: false }); out('memoryless', 'paused'); } catch (e) { out('memoryless', errOf(e)); }
  out('stillrunning', (await sbx.getInfo()).state);
  await counter(sbx);
  await until(() => counted(sbx, 3));
  const before = await count(sbx);
  out('pause', await sbx.pause());
  out('pausedstate', (await sbx.getInfo()).state);
  out('pauseagain', await sbx.pause());
  try { await sbx.commands.run('true'); out('whilepaused', 'ran'); } catch (e) { out('whilepaused', e.constructor.name); }
  try { await Sandbox.pause(sbx.sandboxId, { apiKey: process.env.OTHER_KEY }); out('otherkey', 'paused'); } catch (e) { out('otherkey', e.constructor.name); }
  const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  out('listpaused', listed.map((i) => i.sandboxId === sbx.sandboxId ? 'this' : 'other'));
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60000 });
  out('resumedstate', (await again.getInfo()).state);
  await until(() => counted(again, before.n + 3));
  const after = await count(again);
  out('sameprocess', after.pid === before.pid && after.n > before.n);
  out('files', await again.files.read('/tmp/kept.txt'));
  await again.kill();

  const auto = await Sandbox.create('sh', { timeoutMs: 2000, lifecycle: { onTimeout: 'pause', autoResume: true } });
  out('lifecycle', (await auto.getInfo()).lifecycle);
  await counter(auto);
  out('autopaused', await until(async () => (await auto.getInfo()).state === 'paused'));
  const r = await auto.commands.run('cat /tmp/count');
  out('autoresumed', (await auto.getInfo()).state);
  await until(() => counted(auto, Number(r.stdout.split(' ')[0])));
  out('autosame', (await count(auto)).pid === r.stdout.split(' ')[1].trim());
  await auto.kill();

  const kept = await Sandbox.create('sh', { timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } });
  out('keptpaused', await until(async () => (await kept.getInfo()).state === 'paused'));
  try { await kept.commands.run('true'); out('noautoresume', 'ran'); } catch (e) { out('noautoresume', e.constructor.name); }
  const k2 = await Sandbox.connect(kept.sandboxId, { timeoutMs: 30000 });
  out('keptconnect', (await k2.commands.run('echo up')).stdout);
  await k2.kill();
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}

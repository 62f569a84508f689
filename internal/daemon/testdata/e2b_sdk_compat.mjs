// Drives airlock's E2B API with an E2B SDK (its path in E2B_SDK): the
// newest the tests pin or an older one, whose calls differ (create and
// connect before 2.51 are POST /sandboxes and /sandboxes/{id}/connect).
// Prints one JSON line per step for the Go test to check; the first
// sandbox is left running for the test to look into from the host.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });
try {
  const sbx = await Sandbox.create('sh', { timeoutMs: 120000 });
  out('created', sbx.sandboxId);
  out('run', (await sbx.commands.run('echo ok')).stdout);
  await sbx.files.write('/workspace/one.txt', 'one');
  out('read', await sbx.files.read('/workspace/one.txt'));
  out('alive', await sbx.isRunning());
  const many = await sbx.files.write([
    { path: '/workspace/d/a/f.txt', data: 'A' },
    { path: 'sub/g.txt', data: 'G' },
  ]);
  out('many', many.map((f) => f.path));
  for (const [k, p] of [['dotdot', '../x.txt'], ['outside', '/etc/y.txt'], ['nested', 'sub/../../z.txt']]) {
    try { await sbx.files.write([{ path: p, data: 'no' }]); out(k, 'written'); } catch (e) { out(k, errOf(e)); }
  }
  const again = await Sandbox.connect(sbx.sandboxId);
  out('connect', await again.files.read('/workspace/one.txt'));
  const sb2 = await Sandbox.create('sh');
  out('alive2', await sb2.isRunning());
  out('kill', await sb2.kill());
  out('dead', await sb2.isRunning());
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}

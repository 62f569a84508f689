// Drives a cluster's front with the official E2B SDK (its path in
// E2B_SDK); one JSON line per step for the Go test.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
try {
  const sbx = await Sandbox.create('sh', { metadata: { via: 'front' } });
  out('created', sbx.sandboxId);
  out('run', (await sbx.commands.run('echo "hi from $(cat /proc/1/comm)"')).stdout);
  const bg = await sbx.commands.run('sleep 0.2; echo bg', { background: true });
  out('bg', (await bg.wait()).stdout);
  await sbx.files.write('/workspace/a.txt', 'via the front');
  out('read', await sbx.files.read('/workspace/a.txt'));
  out('download', await (await fetch(await sbx.downloadUrl('/workspace/a.txt'))).text());
  // A signed upload names no sandbox: each node is offered it in turn,
  // its bytes streamed to the one whose sandbox signed it.
  const fd = new FormData();
  fd.append('file', new Blob(['u'.repeat(3 << 20)]), 'up.txt');
  const up = await fetch(await sbx.uploadUrl('/workspace/up.txt'), { method: 'POST', body: fd });
  out('upload', [up.status, (await sbx.files.read('/workspace/up.txt')).length]);
  const items = await Sandbox.list({ query: { metadata: { via: 'front' } } }).nextItems();
  out('list', items.map((i) => i.sandboxId));
  out('info', (await sbx.getInfo()).templateId);
  out('alive', await sbx.isRunning());
  out('connect', await (await Sandbox.connect(sbx.sandboxId)).files.read('/workspace/a.txt'));
  const p1 = await Sandbox.create('sh', { metadata: { via: 'pages' } });
  const p2 = await Sandbox.create('sh', { metadata: { via: 'pages' } });
  const pager = Sandbox.list({ query: { metadata: { via: 'pages' } }, limit: 1 });
  const got = [];
  while (pager.hasNext) got.push(...(await pager.nextItems()).map((i) => i.sandboxId));
  out('pages', [got.length, got.includes(p1.sandboxId) && got.includes(p2.sandboxId)]);
  await p1.kill();
  await p2.kill();
  out('kill', await sbx.kill());
  out('dead', await sbx.isRunning());
  try { await sbx.commands.run('true'); out('after', 'ran'); } catch (e) { out('after', e.constructor.name); }
  try { await Sandbox.create('sh', { apiKey: 'not-a-key-of-this-cluster' }); out('wrongkey', 'created'); } catch (e) { out('wrongkey', e.constructor.name); }
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}

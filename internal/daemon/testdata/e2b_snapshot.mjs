// Snapshots and forks through E2B's JavaScript SDK (its path in
// E2B_SDK): a named snapshot, listed; two sandboxes made from it, each
// with its files and apart from the other; a fork of two; what another
// key (OTHER_KEY) cannot do with it; its deletion. Prints one JSON line
// per step for TestE2BSnapshotJS to check.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const other = { apiKey: process.env.OTHER_KEY };
const files = async (s) => [await s.files.read('/workspace/a.txt'), await s.files.read('/tmp/b.txt')];
const kill = [];

try {
  const sbx = await Sandbox.create('sh', { timeoutMs: 120000, metadata: { who: 'source' } });
  kill.push(sbx);
  await sbx.files.write('/workspace/a.txt', 'snapped');
  await sbx.files.write('/tmp/b.txt', 'tmp too');
  const snap = await sbx.createSnapshot({ name: 'snap-js' });
  out('created', snap);
  out('stillrunning', [(await sbx.getInfo()).state, (await sbx.commands.run('echo up')).stdout]);
  out('listed', (await Sandbox.listSnapshots().nextItems()).map((s) => s.snapshotId));
  out('listedofsandbox', (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId));
  out('listedbyname', (await Sandbox.listSnapshots({ name: 'snap-js' }).nextItems()).map((s) => s.snapshotId));

  out('otherlist', (await Sandbox.listSnapshots(other).nextItems()).map((s) => s.snapshotId));
  try {
    const s = await Sandbox.create(snap.snapshotId, other);
    kill.push(s);
    out('othercreate', 'created');
  } catch (e) {
    out('othercreate', String(e.message));
  }
  out('otherdelete', await Sandbox.deleteSnapshot(snap.snapshotId, other));

  const a = await Sandbox.create(snap.snapshotId, { timeoutMs: 60000 });
  kill.push(a);
  const b = await Sandbox.create(snap.snapshotId, { timeoutMs: 60000 });
  kill.push(b);
  out('fromsnapshot', [await files(a), await files(b), (await a.getInfo()).templateId]);
  await a.files.write('/workspace/a.txt', 'changed in a');
  out('apart', [await a.files.read('/workspace/a.txt'), await b.files.read('/workspace/a.txt')]);

  const forks = await sbx.fork({ count: 2, timeoutMs: 60000 });
  for (const f of forks) if (f instanceof Sandbox) kill.push(f);
  out('forks', forks.map((f) => (f instanceof Sandbox ? 'sandbox' : String(f.message))));
  const ok = forks.filter((f) => f instanceof Sandbox);
  out('forkfiles', await Promise.all(ok.map(files)));
  out('forkstate', await Promise.all(ok.map(async (f) => (await f.getInfo()).state)));
  out('forkmetadata', await Promise.all(ok.map(async (f) => (await f.getInfo()).metadata)));
  out('forkids', new Set([sbx.sandboxId, ...ok.map((f) => f.sandboxId)]).size);

  const unnamed = await sbx.createSnapshot();
  out('unnamed', [unnamed.snapshotId.startsWith('snap_'), unnamed.names]);
  out('unnameddelete', await Sandbox.deleteSnapshot(unnamed.snapshotId));

  out('deleted', await Sandbox.deleteSnapshot(snap.snapshotId));
  out('deletedagain', await Sandbox.deleteSnapshot(snap.snapshotId));
  out('listedafter', (await Sandbox.listSnapshots().nextItems()).map((s) => s.snapshotId));
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exitCode = 1;
} finally {
  await Promise.all(kill.map((s) => s.kill().catch(() => {})));
}

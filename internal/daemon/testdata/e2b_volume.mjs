// Volumes through E2B's JavaScript SDK (its path in E2B_SDK): a volume
// made, mounted in a sandbox that writes a file there (a command, and the
// files API), killed; a second sandbox mounting it by name reads both;
// list, getInfo, destroy (refused while mounted); a mount in /home/user
// refused naming where volumes may go; the content API refused by name;
// what another key (OTHER_KEY) cannot do. Prints one JSON line per step
// for TestE2BVolumeJS to check.
const { Sandbox, Volume } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });
const other = { apiKey: process.env.OTHER_KEY };

try {
  const vol = await Volume.create('data');
  out('created', { id: vol.volumeId.startsWith('vol_'), name: vol.name, token: typeof vol.token === 'string' && vol.token.length >= 40 });
  const a = await Sandbox.create('sh', { timeoutMs: 120000, volumeMounts: { '/mnt/data': vol } });
  const w = await a.commands.run('echo kept > /mnt/data/f && stat -c %U /mnt/data/f');
  out('written', w.stdout);
  await a.files.write('/mnt/data/sub/g.txt', 'by the files API');
  out('info', (await a.getInfo()).volumeMounts);
  out('listed', (await Sandbox.list().nextItems()).find((i) => i.sandboxId === a.sandboxId).volumeMounts);
  try { await Volume.destroy(vol.volumeId); out('destroyattached', 'destroyed'); } catch (e) { out('destroyattached', errOf(e)); }
  await a.kill();

  const b = await Sandbox.create('sh', { timeoutMs: 120000, volumeMounts: { '/srv/v': 'data' } });
  out('read', (await b.commands.run('cat /srv/v/f /srv/v/sub/g.txt')).stdout);
  out('readfiles', await b.files.read('/srv/v/f'));
  out('entries', (await b.files.list('/srv/v')).map((e) => e.name).sort());

  try { await Sandbox.create('sh', { volumeMounts: { '/home/user/data': 'data' } }); out('home', 'mounted'); } catch (e) { out('home', errOf(e)); }
  try { await vol.readFile('/f'); out('content', 'read'); } catch (e) { out('content', errOf(e)); }

  out('list', (await Volume.list()).map((v) => [v.volumeId === vol.volumeId, v.name]));
  const info = await Volume.getInfo(vol.volumeId);
  out('getinfo', [info.volumeId === vol.volumeId, info.name]);
  const conn = await Volume.connect(vol.volumeId);
  out('connect', conn.name);

  out('otherlist', await Volume.list(other));
  try { await Volume.getInfo(vol.volumeId, other); out('otherget', 'found'); } catch (e) { out('otherget', e.constructor.name); }
  try { await Sandbox.create('sh', { ...other, volumeMounts: { '/mnt/d': 'data' } }); out('othermount', 'mounted'); } catch (e) { out('othermount', errOf(e)); }
  out('otherdestroy', await Volume.destroy(vol.volumeId, other));

  await b.kill();
  out('destroy', await Volume.destroy(vol.volumeId));
  out('destroyagain', await Volume.destroy(vol.volumeId));
  out('after', await Volume.list());
} catch (e) {
  out('fatal', errOf(e));
}

// Drives airlock's E2B API with the official E2B SDK (its path in
// E2B_SDK), as an agent framework would; prints one JSON line per step
// for the Go test to check.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, exitCode: e.exitCode, message: String(e.message) });
try {
  const sbx = await Sandbox.create('sh', { envs: { GREETING: 'hi' }, metadata: { team: 'a' }, timeoutMs: 120000 });
  out('created', sbx.sandboxId);
  out('gethost', sbx.getHost(8000));
  let r = await sbx.commands.run('echo "$GREETING $EXTRA"; pwd; echo err >&2', { envs: { EXTRA: 'there' }, cwd: '/tmp' });
  out('run', { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode });
  const chunks = [];
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', { onStdout: (d) => chunks.push(d) });
  out('callbacks', chunks.join(''));
  try { await sbx.commands.run('echo partial; exit 3'); out('exit', 'no error'); } catch (e) { out('exit', { ...errOf(e), stdout: e.stdout }); }
  const began = Date.now();
  try { await sbx.commands.run('sleep 30', { timeoutMs: 500 }); out('timeout', 'no error'); } catch (e) { out('timeout', { ...errOf(e), ms: Date.now() - began }); }
  const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 });
  out('listed', (await sbx.commands.list()).map((p) => p.pid).includes(h.pid));
  out('killed', await sbx.commands.kill(h.pid));
  try { await h.wait(); out('bgwait', 'no error'); } catch (e) { out('bgwait', errOf(e)); }
  const bg = await sbx.commands.run('read x; echo "got $x"; sleep 0.2; echo later', { background: true, stdin: true });
  const seen = [];
  const again2 = await sbx.commands.connect(bg.pid, { onStdout: (d) => seen.push(d) });
  await sbx.commands.sendStdin(bg.pid, 'one\n');
  const res2 = await again2.wait();
  out('reconnect', { seen: seen.join(''), exitCode: res2.exitCode });
  const cat = await sbx.commands.run('cat; echo end', { background: true, stdin: true });
  await sbx.commands.sendStdin(cat.pid, 'typed in\n');
  await sbx.commands.closeStdin(cat.pid);
  out('stdin', (await cat.wait()).stdout);
  await sbx.files.write('/workspace/a.txt', 'hello file');
  out('read', await sbx.files.read('/workspace/a.txt'));
  out('download', await (await fetch(await sbx.downloadUrl('/workspace/a.txt'))).text());
  {
    const res = await fetch(await sbx.downloadUrl('/workspace/a.txt', { useSignatureExpiration: -10000 }));
    out('expired', [res.status, await res.json()]);
    const bad = new URL(await sbx.downloadUrl('/workspace/a.txt'));
    bad.searchParams.set('signature', 'v1_' + 'A'.repeat(43));
    const res2 = await fetch(bad);
    out('badsig', [res2.status, await res2.json()]);
  }
  const fd = new FormData();
  fd.append('file', new Blob(['uploaded']), 'up.txt');
  const up = await fetch(await sbx.uploadUrl('/workspace/up.txt'), { method: 'POST', body: fd });
  out('upload', [up.status, await sbx.files.read('/workspace/up.txt')]);
  await sbx.files.write('/workspace/z.txt', 'zipped'.repeat(1000), { gzip: true });
  out('gzip', (await sbx.files.read('/workspace/z.txt')).length);
  out('cat', (await sbx.commands.run('cat /workspace/a.txt')).stdout);
  try { out('outside', (await sbx.files.read('/etc/passwd')).includes('root:')); } catch (e) { out('outside', errOf(e)); }
  try { await sbx.files.write('/etc/new.txt', 'no'); out('outsidewrite', 'written'); } catch (e) { out('outsidewrite', errOf(e)); }
  try { await sbx.files.read('/workspace/none'); out('missing', 'read'); } catch (e) { out('missing', errOf(e)); }
  const info = await sbx.getInfo();
  out('info', { id: info.sandboxId, templateId: info.templateId, metadata: info.metadata, state: info.state });
  await sbx.setTimeout(60000);
  out('settimeout', 'ok');
  await sbx.getMetrics();
  await sbx.commands.run('i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done');
  const [m] = await sbx.getMetrics();
  out('metrics', { mem: m.memUsed > 0 && m.memUsed < m.memTotal, cpu: m.cpuUsedPct > 0 && m.cpuUsedPct <= 100, cpuCount: m.cpuCount, disk: m.diskTotal > 0, when: Math.abs(m.timestamp - Date.now()) < 60000 });
  const items = await Sandbox.list({ query: { metadata: { team: 'a' } } }).nextItems();
  out('list', items.map((i) => i.sandboxId));
  const b1 = await Sandbox.create('sh', { metadata: { team: 'b' } });
  const b2 = await Sandbox.create('sh', { metadata: { team: 'b' } });
  const pager = Sandbox.list({ query: { metadata: { team: 'b' } }, limit: 1 });
  const pages = [];
  while (pager.hasNext) pages.push((await pager.nextItems()).map((i) => i.sandboxId === b1.sandboxId ? 'b1' : i.sandboxId === b2.sandboxId ? 'b2' : i.sandboxId));
  out('pages', pages);
  const ascPager = Sandbox.list({ query: { metadata: { team: 'b' } }, limit: 1, order: 'asc' });
  const ascPages = [];
  while (ascPager.hasNext) ascPages.push((await ascPager.nextItems()).map((i) => i.sandboxId === b1.sandboxId ? 'b1' : i.sandboxId === b2.sandboxId ? 'b2' : i.sandboxId));
  out('ascpages', ascPages);
  const b1Start = (await b1.getInfo()).startedAt;
  const named = async (query) => (await Sandbox.list({ query: { metadata: { team: 'b' }, ...query } }).nextItems()).map((i) => i.sandboxId === b1.sandboxId ? 'b1' : i.sandboxId === b2.sandboxId ? 'b2' : i.sandboxId);
  out('filters', {
    after: await named({ startedAfter: new Date(b1Start.getTime() + 1) }),
    sh: await named({ template: 'sh' }),
    small: await named({ template: 'small' }),
    none: await named({ template: 'nosuchtool' }),
  });
  const endBefore = (await sbx.getInfo()).endAt;
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1000 });
  out('connectkeeps', (await sbx.getInfo()).endAt.getTime() >= endBefore.getTime());
  await b1.kill();
  await b2.kill();
  const again = await Sandbox.connect(sbx.sandboxId);
  out('connect', (await again.commands.run('cat /workspace/a.txt')).stdout);
  out('exists', [await sbx.files.exists('/workspace/a.txt'), await sbx.files.exists('/workspace/none')]);
  out('makedir', [await sbx.files.makeDir('/workspace/dir/sub'), await sbx.files.makeDir('/workspace/dir/sub'), await sbx.files.makeDir('/workspace')]);
  await sbx.files.rename('/workspace/a.txt', '/workspace/dir/a.txt');
  out('ls', (await sbx.files.list('/workspace/dir')).map((e) => `${e.name}:${e.type}`).sort());
  const fi = await sbx.files.getInfo('/workspace/dir/a.txt');
  out('stat', { name: fi.name, type: fi.type, size: fi.size, path: fi.path, owner: fi.owner, permissions: fi.permissions });
  out('statmore', { group: fi.group, mode: fi.mode, link: fi.symlinkTarget ?? null, metadata: fi.metadata ?? null, recent: fi.modifiedTime instanceof Date && Math.abs(fi.modifiedTime - Date.now()) < 60000 });
  const mw = await sbx.files.write('/workspace/dir/m.txt', 'meta', { metadata: { Owner: 'ann', 'team-id': '7' } });
  const mi = await sbx.files.getInfo('/workspace/dir/m.txt');
  const mr = await sbx.files.rename('/workspace/dir/m.txt', '/workspace/dir/m2.txt');
  const ml = (await sbx.files.list('/workspace/dir')).find((e) => e.name === 'm2.txt');
  const inside = (await sbx.commands.run(`python3 -c "import os; print(os.getxattr('/workspace/dir/m2.txt', 'user.e2b.owner').decode())"`)).stdout;
  const mo = await sbx.files.write('/workspace/dir/m2.txt', 'again');
  out('metadata', { write: mw.metadata, info: mi.metadata, rename: mr.metadata, list: ml.metadata, inside, overwritten: mo.metadata ?? null, after: (await sbx.files.getInfo('/workspace/dir/m2.txt')).metadata ?? null });
  await sbx.commands.run('cd /workspace && ln -s dir/a.txt ln && ln -s /workspace/dir lndir && ln -s nowhere dangling && ln -s ln lnln && ln -s /etc/passwd pw && ln -s /proc/self/cwd pr && ln -s ../../../../etc/group up && ln -s loop2 loop1 && ln -s loop1 loop2');
  const links = {};
  for (const n of ['ln', 'lndir', 'dangling', 'lnln', 'pw', 'pr', 'up', 'loop1']) {
    const e = await sbx.files.getInfo(`/workspace/${n}`);
    links[n] = [e.type ?? null, e.symlinkTarget, e.mode, e.permissions];
  }
  out('links', links);
  await sbx.commands.run('mkdir -p /workspace/srt/b/a /workspace/srt/c && touch /workspace/srt/b/z /workspace/srt/a /workspace/srt/B /workspace/srt/c/d');
  out('sorted', (await sbx.files.list('/workspace/srt', { depth: 3 })).map((e) => e.path.slice('/workspace/srt/'.length)));
  await sbx.files.remove('/workspace/none');
  await sbx.files.remove('/workspace/none/at/all');
  out('removemissing', 'ok');
  await sbx.files.remove('/workspace/dir');
  out('removed', await sbx.files.exists('/workspace/dir'));
  await sbx.commands.run('ln -s /etc /workspace/evil');
  try { await sbx.files.list('/workspace/evil'); out('evil', 'listed'); } catch (e) { out('evil', errOf(e)); }
  try { await sbx.files.getInfo('/workspace/evil/passwd'); out('evilstat', 'read'); } catch (e) { out('evilstat', errOf(e)); }
  // A terminal (relayed by init on a gvisor tool).
  try {
    const enc = (x) => new TextEncoder().encode(x);
    let screen = '';
    const dec = new TextDecoder();
    const term = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: (d) => { screen += dec.decode(d); } });
    const waitFor = async (re) => { for (let i = 0; i < 200 && !re.test(screen); i++) await new Promise((r) => setTimeout(r, 25)); return re.test(screen); };
    await sbx.pty.sendInput(term.pid, enc('stty size; tty; echo "pty-$((6*7))"\n'));
    const first = await waitFor(/pty-42/);
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, enc('stty size; exit 5\n'));
    let ptyExit;
    try { await term.wait(); ptyExit = 0; } catch (e) { ptyExit = e.exitCode; }
    out('pty', { first, size: /24 80/.test(screen), tty: /\/dev\/pts\/\d/.test(screen), resized: /30 100/.test(screen), exit: ptyExit });
  } catch (e) { out('pty', errOf(e)); }
  try { await sbx.pty.create({ cols: 0, rows: 24 }); out('ptyzero', 'created'); } catch (e) { out('ptyzero', errOf(e)); }
  await sbx.files.makeDir('/workspace/w');
  const watched = [];
  const wh = await sbx.files.watchDir('/workspace/w', (e) => watched.push(`${e.type}:${e.name}`), { recursive: true });
  await sbx.commands.run('cd /workspace/w && echo x > f.txt && mkdir d && sleep 0.3 && echo y > d/g.txt && mv f.txt h.txt && rm h.txt');
  for (let i = 0; i < 100 && !watched.includes('remove:h.txt'); i++) await new Promise((r) => setTimeout(r, 50));
  await wh.stop();
  out('watch', watched.filter((e, i) => e !== watched[i - 1]));
  await sbx.files.makeDir('/workspace/w2');
  const withEntry = [];
  const we = await sbx.files.watchDir('/workspace/w2', (e) => withEntry.push(`${e.type}:${e.name}:${e.entry ? `${e.entry.type} ${e.entry.path} ${e.entry.permissions}` : '-'}`), { includeEntry: true, allowNetworkMounts: true });
  await sbx.commands.run('cd /workspace/w2 && echo x > f.txt && sleep 0.3 && chmod 600 f.txt && sleep 0.3 && rm f.txt');
  for (let i = 0; i < 100 && !withEntry.some((e) => e.startsWith('remove:')); i++) await new Promise((r) => setTimeout(r, 50));
  await we.stop();
  out('watchentry', withEntry.filter((e, i) => e !== withEntry[i - 1]));
  try { await sbx.files.watchDir('/workspace/evil', () => {}); out('watchevil', 'watched'); } catch (e) { out('watchevil', errOf(e)); }
  try { await sbx.files.watchDir('/workspace/none', () => {}); out('watchnone', 'watched'); } catch (e) { out('watchnone', errOf(e)); }
  const exits = [];
  await sbx.files.watchDir('/workspace', () => {}, { timeoutMs: 0, onExit: (err) => exits.push(err ? err.constructor.name : 'none') });
  const inflight = await sbx.commands.run('sleep 60', { background: true });
  const inflightEnd = inflight.wait().then(() => 'finished', (e) => errOf(e));
  out('kill', await sbx.kill());
  out('killedwait', await inflightEnd);
  for (let i = 0; i < 100 && exits.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
  out('watchexit', exits);
  out('killagain', await Sandbox.kill(sbx.sandboxId));
  try { await sbx.commands.run('true'); out('after', 'ran'); } catch (e) { out('after', errOf(e)); }
  const small = await Sandbox.create('small');
  try {
    await small.commands.run(`x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo \${#x}`);
    out('breach', 'no error');
  } catch (e) { out('breach', errOf(e)); }
  try { await small.commands.run('true'); out('afterbreach', 'ran'); } catch (e) { out('afterbreach', errOf(e)); }
  try { await Sandbox.create('sh', { apiKey: 'not-a-key-of-this-daemon' }); out('wrongkey', 'created'); } catch (e) { out('wrongkey', errOf(e)); }
  try { await Sandbox.create('nosuchtool'); out('notool', 'created'); } catch (e) { out('notool', errOf(e)); }
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}

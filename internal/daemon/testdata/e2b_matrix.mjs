// The compatibility matrix's probe for E2B's JavaScript SDK (its path in
// E2B_SDK; the code interpreter's in E2B_INTERPRETER_SDK, if it is
// tested with this SDK): one probe per feature, the same as
// e2b_matrix.py's, each printed as a JSON line {"k": feature, "v":
// {"result": ..., "detail": ...}} where result is "works", "refused"
// (airlock said why it does not), "absent" (this SDK has no such call),
// "untested" or "fails" (anything else: a difference to fix).
// TestE2BMatrix runs it and writes or checks the matrix of docs/e2b.md.
const { Sandbox, Volume } = await import(process.env.E2B_SDK);
const http = await import('node:http');
const out = (k, v) => console.log(JSON.stringify({ k, v }));

class Check extends Error {}
class Untested extends Error {}
const check = (ok, what) => {
  if (!ok) throw new Check(what);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const refusal = /airlock does not|not supported by airlock|is not served by airlock|is not supported/;

async function probe(name, fn) {
  try {
    out(name, { result: 'works', detail: (await fn()) || '' });
  } catch (e) {
    const msg = String((e && e.message) || e);
    if (e instanceof Untested) out(name, { result: 'untested', detail: msg });
    else if (e instanceof TypeError && /is not a function/.test(msg)) out(name, { result: 'absent', detail: msg });
    else if (!(e instanceof Check) && refusal.test(msg)) out(name, { result: 'refused', detail: msg.replace(/^\d+: /, '') });
    else out(name, { result: 'fails', detail: `${e && e.constructor ? e.constructor.name : 'error'}: ${msg}` });
  }
}

const sbx = await Sandbox.create('sh', { timeoutMs: 120000, metadata: { probe: 'matrix' }, envs: { PROBE: 'yes' } });
try {
  await probe('lifecycle', async () => {
    check(await sbx.isRunning(), 'isRunning of a new sandbox');
    const info = await sbx.getInfo();
    check(info.sandboxId === sbx.sandboxId && info.metadata.probe === 'matrix', 'getInfo');
    await sbx.setTimeout(90000);
    const listed = await Sandbox.list({ query: { metadata: { probe: 'matrix' } } }).nextItems();
    check(listed.some((i) => i.sandboxId === sbx.sandboxId), 'list by metadata');
    const again = await Sandbox.connect(sbx.sandboxId);
    check((await again.commands.run('echo $PROBE')).stdout === 'yes\n', 'connect and the create envs');
    const other = await Sandbox.create('sh');
    check(await other.kill(), 'kill');
    check(!(await other.isRunning()), 'isRunning after kill');
  });
  await probe('commands', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2', { cwd: '/tmp', envs: { A: 'b' } });
    check(r.stdout === 'out\n' && r.stderr === 'err\n' && r.exitCode === 0, 'run');
    let seen = '';
    const h = await sbx.commands.run('echo 1; sleep 0.2; echo 2', { background: true, onStdout: (d) => { seen += d; } });
    check((await h.wait()).exitCode === 0 && seen === '1\n2\n', 'a background command and its callback');
    let code = 0;
    try { await sbx.commands.run('exit 3'); } catch (e) { code = e.exitCode; }
    check(code === 3, 'a non-zero exit');
    const k = await sbx.commands.run('sleep 30', { background: true });
    check(await sbx.commands.kill(k.pid), 'kill a command');
  });
  await probe('files', async () => {
    await sbx.files.write('/workspace/m/a.txt', 'A');
    check((await sbx.files.read('/workspace/m/a.txt')) === 'A', 'write and read');
    await sbx.files.write([{ path: '/workspace/m/b.txt', data: 'B' }, { path: '/tmp/c.txt', data: 'C' }]);
    check((await sbx.files.list('/workspace/m')).map((e) => e.name).sort().join() === 'a.txt,b.txt', 'list');
    check(await sbx.files.exists('/tmp/c.txt'), 'exists');
    await sbx.files.makeDir('/workspace/m/d');
    await sbx.files.rename('/workspace/m/b.txt', '/workspace/m/d/b.txt');
    await sbx.files.remove('/workspace/m/a.txt');
    check(!(await sbx.files.exists('/workspace/m/a.txt')), 'remove');
    const url = await sbx.downloadUrl('/workspace/m/d/b.txt');
    check((await (await fetch(url)).text()) === 'B', 'a signed download URL');
  });
  await probe('watch', async () => {
    await sbx.files.makeDir('/workspace/w');
    const seen = [];
    const h = await sbx.files.watchDir('/workspace/w', (e) => seen.push(`${e.type}:${e.name}`), { recursive: true });
    await sbx.commands.run('echo x > /workspace/w/f.txt');
    for (let i = 0; i < 100 && !seen.some((e) => e.endsWith(':f.txt')); i++) await sleep(50);
    await h.stop();
    check(seen.includes('create:f.txt'), `watchDir saw ${seen.join(' ')}`);
  });
  await probe('pty', async () => {
    let data = '';
    const dec = new TextDecoder();
    const p = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { data += dec.decode(d); } });
    await sbx.pty.sendInput(p.pid, new TextEncoder().encode('stty size; exit 4\n'));
    const r = await p.wait().catch((e) => e);
    check(data.includes('24 80') && r.exitCode === 4, `pty said ${JSON.stringify(data.slice(-80))}`);
  });
  await probe('ports', async () => {
    await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp >/dev/null 2>&1', { background: true });
    await sbx.commands.run('for i in $(seq 100); do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8000))" 2>/dev/null && exit 0; sleep 0.05; done; exit 1');
    const api = new URL(process.env.E2B_API_URL);
    const [status, body] = await new Promise((resolve, reject) => {
      const req = http.request({ host: api.hostname, port: api.port, path: '/', headers: { Host: sbx.getHost(8000), 'e2b-traffic-access-token': sbx.trafficAccessToken } }, (res) => {
        let b = '';
        res.on('data', (d) => { b += d; });
        res.on('end', () => resolve([res.statusCode, b]));
      });
      req.on('error', reject);
      req.end();
    });
    check(status === 200 && body.includes('Directory listing'), `getHost(8000) answered ${status}`);
  });
  await probe('interpreter', async () => {
    if (!process.env.E2B_INTERPRETER_SDK) throw new Untested('not with this SDK');
    const { Sandbox: CI } = await import(process.env.E2B_INTERPRETER_SDK);
    const ci = await CI.create();
    try {
      await ci.runCode('x = 6');
      const r = await ci.runCode('x * 7');
      check(r.text === '42', 'runCode');
    } finally {
      await ci.kill();
    }
  });
  await probe('pause', async () => {
    await sbx.commands.run('sh -c "sleep 600" >/dev/null 2>&1 & echo $! > /tmp/paused');
    await (sbx.pause ? sbx.pause() : sbx.betaPause());
    check((await sbx.getInfo()).state === 'paused', 'getInfo of a paused sandbox');
    const again = await Sandbox.connect(sbx.sandboxId);
    const r = await again.commands.run('kill -0 "$(cat /tmp/paused)" && echo alive');
    check(r.stdout === 'alive\n', 'connect resumes it, its process alive');
  });
  await probe('snapshots', async () => {
    await sbx.files.write('/workspace/snap.txt', 'in the snapshot');
    const snap = await sbx.createSnapshot();
    const from = await Sandbox.create(snap.snapshotId, { timeoutMs: 60000 });
    try {
      check((await from.files.read('/workspace/snap.txt')) === 'in the snapshot', 'a sandbox from the snapshot has its files');
    } finally {
      await from.kill();
    }
    check(await Sandbox.deleteSnapshot(snap.snapshotId), 'deleteSnapshot');
  });
  await probe('volumes', async () => {
    if (typeof Volume !== 'function') throw new TypeError('this SDK has no Volume: Volume.create is not a function');
    const vol = await Volume.create(`matrix-${Date.now()}`);
    try {
      const a = await Sandbox.create('sh', { timeoutMs: 60000, volumeMounts: { '/mnt/vol': vol } });
      await a.commands.run('echo kept > /mnt/vol/f');
      await a.kill();
      const b = await Sandbox.create('sh', { timeoutMs: 60000, volumeMounts: { '/mnt/vol': vol.name } });
      try {
        check((await b.files.read('/mnt/vol/f')) === 'kept\n', 'a second sandbox reads what the first wrote');
      } finally {
        await b.kill();
      }
    } finally {
      check(await Volume.destroy(vol.volumeId), 'Volume.destroy');
    }
  });
  await probe('network', async () => {
    const closed = await Sandbox.create('sh', { allowInternetAccess: false });
    try {
      check((await closed.commands.run('echo in')).stdout === 'in\n', 'a sandbox without internet runs');
    } finally {
      await closed.kill();
    }
  });
  await probe('metrics', async () => {
    const [m] = await sbx.getMetrics();
    check(m && m.memTotal > 0 && m.cpuCount >= 1, 'getMetrics');
  });
} finally {
  await sbx.kill().catch(() => {});
}

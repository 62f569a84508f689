// E2B's Template SDK against airlock (its path in E2B_SDK): a template
// built from an image of airlock's store, with a file copied from this
// script's context (CONTEXT), an environment variable, a RUN fetching
// from the mirror its build may reach (MIRROR) and a working directory;
// a sandbox created from it; the same build again, from the cache; a
// RUN reaching an unnamed host and one over the memory ceiling, each
// failing with why; what another key (OTHER_KEY) cannot do, and a third
// (THIRD_KEY) building the same template on its own. Prints one
// JSON line per step for TestE2BTemplateBuildJS to check.
const { Sandbox, Template } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const other = { apiKey: process.env.OTHER_KEY };
const ctx = process.env.CONTEXT;
const mirror = process.env.MIRROR;
const kill = [];

const template = () =>
  Template({ fileContextPath: ctx })
    .fromImage('busybox-base')
    .copy('hello.sh', '/opt/app/hello.sh', { mode: 0o755 })
    .copy('data', '/opt/app/data')
    .setEnvs({ GREETING: 'hi' })
    .runCmd(`wget -q -O /opt/app/pkg http://${mirror}/pool/tool.deb`)
    .setWorkdir('/opt/app');

async function build(tpl, name, opts = {}) {
  const logs = [];
  try {
    const info = await Template.build(tpl, name, { ...opts, onBuildLogs: (l) => logs.push(String(l.message)) });
    return { ok: true, info, logs };
  } catch (e) {
    return { ok: false, error: `${e.name}: ${e.message}`, logs };
  }
}

try {
  const first = await build(template(), 'my-tool');
  if (!first.ok) throw new Error('first build: ' + first.error + '\n' + first.logs.join('\n'));
  out('built', [first.info.name, typeof first.info.templateId, first.logs.some((l) => l.includes('Uploaded'))]);
  out('exists', [await Template.exists('my-tool'), await Template.exists('no-such-tool')]);

  const sbx = await Sandbox.create('my-tool', { timeoutMs: 60000 });
  kill.push(sbx);
  const hello = await sbx.commands.run('/opt/app/hello.sh');
  out('hello', hello.stdout);
  out('files', [(await sbx.commands.run('cat /opt/app/pkg /opt/app/data/a.txt /opt/app/data/sub/b.txt')).stdout, (await sbx.commands.run('pwd')).stdout]);
  out('byid', (await Sandbox.create(first.info.templateId, { timeoutMs: 30000 }).then((s) => (kill.push(s), s.commands.run('cat /opt/app/data/a.txt')))).stdout);

  const again = await build(template(), 'my-tool');
  out('again', [again.ok, again.logs.filter((l) => l.trim() === 'cached').length, again.logs.some((l) => l.includes('Skipping upload'))]);

  // Tags: two more on the default's build, a create by one, one removed.
  const assigned = await Template.assignTags('my-tool', ['v2', 'stable']);
  out('tags', [assigned.tags, (await Template.getTags(first.info.templateId)).map((t) => t.tag)]);
  const v2 = await Sandbox.create('my-tool:v2', { timeoutMs: 30000 });
  kill.push(v2);
  out('bytag', (await v2.commands.run('cat /opt/app/data/sub/b.txt')).stdout);
  await Template.removeTags('my-tool', 'stable');
  out('tagsafter', (await Template.getTags(first.info.templateId)).map((t) => t.tag));

  // An e2b.Dockerfile, as `e2b template` builds one: the SDK parses it
  // into steps (and ends as its user "user" in /home/user).
  const fromFile = await build(Template({ fileContextPath: ctx }).fromDockerfile(
    'FROM busybox-base\nENV WHO=dockerfile\nCOPY hello.sh /opt/tool/\nRUN echo "made by $WHO" > /opt/tool/made\n'), 'from-dockerfile');
  if (!fromFile.ok) throw new Error('fromDockerfile: ' + fromFile.error + '\n' + fromFile.logs.join('\n'));
  const df = await Sandbox.create('from-dockerfile', { timeoutMs: 30000 });
  kill.push(df);
  out('dockerfile', (await df.commands.run('cat /opt/tool/made; id -u; pwd')).stdout);

  const denied = await build(Template({ fileContextPath: ctx }).fromImage('busybox-base').runCmd(`wget -q -O- http://elsewhere.test:${mirror.split(':')[1]}/x`), 'denied');
  out('denied', [denied.ok, denied.error, denied.logs.some((l) => l.includes('egress denied') && l.includes('elsewhere.test'))]);
  const big = await build(Template({ fileContextPath: ctx }).fromImage('busybox-base').runCmd('head -c 400000000 /dev/zero | tail'), 'big');
  out('memory', [big.ok, big.error]);
  const nobase = await build(Template({ fileContextPath: ctx }).fromImage('no-such-image').runCmd('true'), 'nobase');
  out('nobase', [nobase.ok, nobase.error]);

  try {
    const s = await Sandbox.create('my-tool', other);
    kill.push(s);
    out('othercreate', 'created');
  } catch (e) {
    out('othercreate', String(e.message));
  }
  out('otherexists', await Template.exists('my-tool', other));
  const otherBuild = await build(template(), 'mine', other);
  out('otherbuild', [otherBuild.ok, otherBuild.error]);
  // A third key that may build: the same template is its own, its
  // files uploaded again and nothing taken from the first key's cache.
  const third = { apiKey: process.env.THIRD_KEY };
  const thirdBuild = await build(template(), 'my-tool', third);
  out('thirdbuild', [thirdBuild.ok, thirdBuild.logs.filter((l) => l.trim() === 'cached').length, thirdBuild.logs.filter((l) => l.startsWith('Uploaded')).length,
    thirdBuild.info && thirdBuild.info.templateId !== first.info.templateId]);
  // Deleted (the SDK's delete of a template is deleteSnapshot's call):
  // not by another key; then no create finds it.
  out('deleted', [await Sandbox.deleteSnapshot('my-tool', other), await Sandbox.deleteSnapshot('my-tool'), await Template.exists('my-tool')]);
  for (const s of kill.splice(0)) await s.kill().catch(() => {});
  try {
    kill.push(await Sandbox.create('my-tool', { timeoutMs: 30000 }));
    out('afterdelete', 'created');
  } catch (e) {
    out('afterdelete', String(e.message));
  }
} catch (e) {
  out('fatal', String(e.stack || e));
} finally {
  for (const s of kill) await s.kill().catch(() => {});
}

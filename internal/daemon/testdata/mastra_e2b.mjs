// Mastra's E2B integration (@mastra/e2b's E2BSandbox in a Mastra
// Workspace, as installed from npm by scripts/test) against airlock's
// E2B API: the workspace starts the sandbox (Mastra creates it with
// lifecycle onTimeout "pause"), its execute_command tool runs in it,
// files go in through the sandbox's writeFiles, the workspace's stop
// pauses the sandbox, a start finds it again by its metadata and
// resumes it (connect), the tool runs again with the files and the
// process left running kept, and destroy kills it. Prints one JSON line
// per step for TestMastraE2B to check. Mastra's default template, one
// it builds, is refused.
import { Workspace } from '@mastra/core/workspace';
import { createWorkspaceTools } from '@mastra/core/workspace';
import { E2BSandbox } from '@mastra/e2b';
import { Sandbox } from 'e2b';

const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });

try {
  // Without a template named, Mastra builds one of its own
  // (Template.build), which airlock refuses by name.
  try { await new E2BSandbox({}).start(); out('default', 'started'); } catch (e) { out('default', errOf(e)); }
  // The template names one of airlock's tools.
  const sandbox = new E2BSandbox({ template: process.env.MASTRA_TEMPLATE, timeout: 120000 });
  const workspace = new Workspace({ sandbox });
  await workspace.init();
  const id = sandbox.e2b.sandboxId;
  out('status', sandbox.status);
  out('lifecycle', (await Sandbox.getInfo(id)).lifecycle);

  const tools = await createWorkspaceTools(workspace);
  out('tools', Object.keys(tools).sort());
  const exec = tools.mastra_workspace_execute_command;
  const run = async (command) => String(await exec.execute({ command }, {}));

  out('tool', await run(process.env.MASTRA_CMD));
  await sandbox.writeFiles([{ path: '/tmp/mastra.txt', content: 'kept across a pause' }]);
  // A process left running: a pause freezes it, a resume thaws it.
  await run('sh -c "sleep 600" >/dev/null 2>&1 & echo $! > /tmp/sleeper');
  out('read', await run('cat /tmp/mastra.txt'));

  await workspace.stop();
  out('stopped', sandbox.status);
  out('pausedstate', (await Sandbox.getInfo(id)).state);
  const paused = await Sandbox.list({ query: { metadata: { 'mastra-sandbox-id': sandbox.id }, state: ['paused'] } }).nextItems();
  out('listedpaused', paused.map((i) => i.sandboxId === id));

  // A start finds the paused sandbox by its mastra-sandbox-id and
  // connects, which resumes it.
  await sandbox.start();
  out('resumedsame', sandbox.e2b.sandboxId === id);
  out('resumedstate', (await Sandbox.getInfo(id)).state);
  out('again', await run('cat /tmp/mastra.txt; echo; kill -0 "$(cat /tmp/sleeper)" && echo sleeper alive'));

  await workspace.destroy();
  out('destroyed', sandbox.status);
  try { await Sandbox.getInfo(id); out('gone', 'found'); } catch (e) { out('gone', e.constructor.name); }
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}

// Drives airlock's code interpreter with the official
// @e2b/code-interpreter SDK (its path in E2B_CI_SDK), as a code-running
// agent would; prints one JSON line per step for the Go test to check.
const { Sandbox } = await import(process.env.E2B_CI_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });
try {
  // The SDK's default template: code-interpreter-v1.
  const sbx = await Sandbox.create({ timeoutMs: 120000 });
  out('created', sbx.sandboxId.length > 0);
  let ex = await sbx.runCode('x = 21\nprint("hi")');
  out('print', { stdout: ex.logs.stdout, results: ex.results.length, count: ex.executionCount });
  ex = await sbx.runCode('x * 2');
  out('main', { text: ex.results[0]?.text, main: ex.results[0]?.isMainResult, error: ex.error ?? null });
  const seen = [];
  await sbx.runCode('import sys\nprint("out")\nprint("err", file=sys.stderr)', {
    onStdout: (m) => seen.push(['stdout', m.line, typeof m.timestamp]),
    onStderr: (m) => seen.push(['stderr', m.line, typeof m.timestamp]),
  });
  out('callbacks', seen);
  ex = await sbx.runCode('display("shown")\n1/0');
  out('error', { name: ex.error?.name, value: ex.error?.value, traceback: (ex.error?.traceback ?? '').includes('ZeroDivisionError'), results: ex.results.map((r) => r.text) });
  ex = await sbx.runCode('import os\nos.environ["ONCE"]', { envs: { ONCE: 'yes' } });
  out('env', ex.results[0]?.text);
  ex = await sbx.runCode('"ONCE" in os.environ');
  out('envgone', ex.results[0]?.text);
  // Contexts: one in /tmp with its own state, bash by language, the
  // list, restart and remove.
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
  out('context', { language: ctx.language, cwd: ctx.cwd });
  ex = await sbx.runCode('import os\nos.getcwd(), "x" in dir()', { context: ctx });
  out('incontext', ex.results[0]?.text);
  ex = await sbx.runCode('n=6; echo $((n*7))', { language: 'bash' });
  out('bash', { stdout: ex.logs.stdout, error: ex.error ?? null });
  ex = await sbx.runCode('echo $n; false', { language: 'bash' });
  out('bashstate', { stdout: ex.logs.stdout, error: ex.error?.name });
  out('list', (await sbx.listCodeContexts()).map((c) => [c.language, c.cwd === '/tmp']));
  await sbx.runCode('y = 1', { context: ctx });
  await sbx.restartCodeContext(ctx);
  ex = await sbx.runCode('y', { context: ctx });
  out('restarted', ex.error?.name);
  await sbx.removeCodeContext(ctx.id);
  try { await sbx.runCode('1', { context: ctx }); out('removed', 'no error'); } catch (e) { out('removed', [errOf(e).name, errOf(e).message === `Context ${ctx.id} not found`]); }
  try { await sbx.runCode('1', { language: 'r' }); out('language', 'no error'); } catch (e) { out('language', errOf(e)); }
  try { await sbx.runCode('while True: pass', { timeoutMs: 1000 }); out('timeout', 'no error'); } catch (e) { out('timeout', errOf(e).name); }
  let after = null;
  for (let i = 0; i < 50 && after !== '21'; i++) {
    try { after = (await sbx.runCode('x')).results[0]?.text ?? null; } catch (e) { after = errOf(e).name; }
    if (after !== '21') await new Promise((r) => setTimeout(r, 200));
  }
  out('aftertimeout', after);
  // Rich results: a matplotlib figure as a PNG, a DataFrame as HTML and
  // its columns.
  ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()');
  out('png', ex.results.map((r) => [r.formats().includes('png'), (r.png ?? '').slice(0, 8)]));
  ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})');
  out('dataframe', { data: ex.results[0]?.data, html: (ex.results[0]?.html ?? '').includes('<table') });
  await sbx.kill();
  try { await sbx.runCode('1'); out('afterkill', 'no error'); } catch (e) { out('afterkill', errOf(e).name); }
  // A kernel that breaches the sandbox's memory: the execution ends
  // naming the limit, and the sandbox is gone.
  const big = await Sandbox.create({ timeoutMs: 120000 });
  ex = await big.runCode('blocks = []\nwhile True: blocks.append(bytearray(64 << 20))');
  out('memory', { name: ex.error?.name, memory: (ex.error?.value ?? '').includes('memory') });
  try { await big.runCode('1'); out('aftermemory', 'no error'); } catch (e) { out('aftermemory', errOf(e).name); }
} catch (e) {
  out('fatal', { ...errOf(e), stack: String(e.stack) });
}
// The SDK leaves its request timer running after a refused call (60 s):
// the script ends here rather than wait for it.
process.exit(0);

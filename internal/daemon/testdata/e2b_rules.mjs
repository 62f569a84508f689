// E2B's network.rules through its JavaScript SDK (its path in E2B_SDK),
// against a template (tool gh) that brokers example.com transparently: a
// rule setting a header the service's menu forwards is taken, and the
// sandbox's curl to the real URL (REAL) reaches the upstream with it
// and with the operator's credential, and an undeclared call is refused;
// rules wider than the operator's
// config are refused, each by name. One JSON line per step for
// TestE2BNetworkRulesJS.
const { Sandbox } = await import(process.env.E2B_SDK);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const errOf = (e) => ({ name: e.constructor.name, message: String(e.message) });
const real = process.env.REAL;
const rule = (host, headers) => ({ network: { rules: { [host]: [{ transform: { headers } }] } } });

try {
  const sb = await Sandbox.create('gh', { timeoutMs: 120000, ...rule('example.com', { 'X-GitHub-Api-Version': '2022-11-28' }) });
  out('call', (await sb.commands.run(`curl -sS ${real}/api/repos/octo/hello/issues`)).stdout);
  out('refused', (await sb.commands.run(`curl -sS -X DELETE ${real}/api/repos/octo/hello`)).stdout);
  const env = await sb.commands.run('env; for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < $f; done 2>/dev/null; true');
  out('env', env.stdout);
  await sb.kill();
  for (const [k, host, headers] of [
    ['otherhost', 'api.other.test', { 'X-GitHub-Api-Version': '1' }],
    ['credential', 'example.com', { Authorization: 'Bearer from-the-caller' }],
    ['apikey', 'example.com', { 'X-Api-Key': 'from-the-caller' }],
    ['unforwarded', 'example.com', { 'X-Original-URL': '/admin' }],
    ['host', 'example.com', { Host: 'other.test' }],
  ]) {
    try {
      const s = await Sandbox.create('gh', rule(host, headers));
      out(k, 'created');
      await s.kill();
    } catch (e) {
      out(k, errOf(e));
    }
  }
} catch (e) {
  out('fatal', errOf(e));
}

// The web console in a real browser (Debian's chromium, driven by
// playwright-core from PLAYWRIGHT): the local operator's one-time login
// (LOGIN_URL) and what the page shows after the runs TestConsole made;
// then a token's holder (TOKEN), who sees only its own. Prints one JSON
// line per step; screenshots go to SHOTS.
const { chromium } = await import(process.env.PLAYWRIGHT);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const shots = process.env.SHOTS;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1100 } });
  const errors = [];
  // The page's own errors (a 401 before the login is the console's
  // question, not an error).
  page.on('pageerror', (e) => errors.push(String(e)));
  // No session: the login form.
  await page.goto(process.env.BASE + '/console/');
  await page.waitForSelector('#login:not([hidden])');
  out('loginform', true);
  // A used or wrong code: back to the form, saying so.
  await page.goto(process.env.BASE + '/console/login?code=wrong');
  await page.waitForSelector('#login-failed:not([hidden])');
  out('badcode', true);
  await page.goto(process.env.LOGIN_URL);
  await page.waitForSelector('#app:not([hidden])');
  out('who', await page.textContent('#who'));
  // The code works once.
  const again = await (await browser.newContext()).newPage();
  await again.goto(process.env.LOGIN_URL);
  await again.waitForSelector('#login-failed:not([hidden])');
  out('codeonce', true);
  await page.waitForSelector('#pools tr[data-tool="sh"]');
  out('pool', (await page.textContent('#pools tr[data-tool="sh"]')).replace(/\s+/g, ' ').trim());
  await page.waitForFunction(() => /of [1-9]/.test(document.querySelector('[data-gauge="sandboxes"]')?.textContent || ''));
  out('capacity', (await page.textContent('[data-gauge="sandboxes"]')).replace(/\s+/g, ' ').trim());
  // The live run, drawn over time (a few samples), against its ceiling.
  const live = `#runs tr[data-run="${process.env.LIVE_RUN}"]`;
  await page.waitForSelector(live);
  await page.waitForFunction((sel) => {
    const p = document.querySelector(sel + ' polyline');
    return p && p.getAttribute('points').split(' ').length >= 3;
  }, live);
  out('live', (await page.textContent(live + ' td:nth-child(3)')).trim());
  // The audit trail: the breach, the refused egress.
  await page.waitForSelector('#audit tr[data-kind="limit.breach"]');
  out('breachrow', (await page.textContent('#audit tr[data-kind="limit.breach"]')).replace(/\s+/g, ' ').trim());
  await page.waitForSelector('#audit tr[data-kind="egress"].bad');
  out('egressrow', (await page.textContent('#audit tr[data-kind="egress"].bad')).replace(/\s+/g, ' ').trim());
  // Filtered by code: only that code's decisions.
  await page.fill('#filters input[name="code"]', process.env.EGRESS_CODE);
  await page.waitForFunction(() => document.querySelectorAll('#audit tbody tr').length > 0);
  out('filtered', await page.$$eval('#audit tbody tr', (rows) => [...new Set(rows.map((r) => r.dataset.kind))]));
  await page.fill('#filters input[name="code"]', '');
  await page.screenshot({ path: shots + '/console-overview.png', fullPage: true });
  // The breached run's page: its command and its breach, named.
  await page.goto(process.env.BASE + '/console/#run/' + process.env.BREACH_RUN);
  await page.waitForSelector('#detail-breach');
  out('breach', await page.textContent('#detail-breach'));
  out('command', await page.textContent('#detail-command'));
  out('outcome', await page.textContent('#detail-outcome'));
  // The egress run's page: its decisions.
  await page.goto(process.env.BASE + '/console/#run/' + process.env.EGRESS_RUN);
  await page.waitForSelector('#detail-net');
  out('net', (await page.textContent('#detail-net')).replace(/\s+/g, ' ').trim());
  await page.screenshot({ path: shots + '/console-run.png', fullPage: true });
  // The refused tool's policy suggestion, from the pools' link.
  await page.goto(process.env.BASE + '/console/');
  await page.click('#pools tr[data-tool="web"] a');
  await page.waitForSelector('#policy-yaml');
  out('policy', await page.textContent('#policy-yaml'));
  // The live run's page, its samples charted, then killed from the list.
  await page.goto(process.env.BASE + '/console/#run/' + process.env.LIVE_RUN);
  await page.waitForSelector('#detail-charts .chart');
  out('charts', await page.$$eval('#detail-charts .chart', (c) => c.length));
  await page.screenshot({ path: shots + '/console-live-run.png', fullPage: true });
  await page.click(live + ' button');
  await page.waitForSelector(live, { state: 'detached', timeout: 15000 });
  out('killed', true);
  out('errors', errors);

  // A token's holder: the form; its own runs only.
  const tctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const tp = await tctx.newPage();
  await tp.goto(process.env.BASE + '/console/');
  await tp.fill('#token', process.env.TOKEN);
  await tp.click('#login-button');
  await tp.waitForSelector('#app:not([hidden])');
  out('tokenwho', await tp.textContent('#who'));
  await tp.waitForSelector(`#audit tr td a[href="#run/${process.env.TOKEN_RUN}"]`);
  out('tokenclients', await tp.$$eval('#audit tbody tr td:nth-child(4)', (tds) => [...new Set(tds.map((td) => td.textContent))]));
  out('tokenbreach', await tp.$$eval('#audit tr[data-kind="limit.breach"]', (r) => r.length));
  await tp.screenshot({ path: shots + '/console-token.png', fullPage: true });
  // Logged out: the form again.
  await tp.click('#logout button');
  await tp.waitForSelector('#login:not([hidden])');
  out('loggedout', true);
} catch (e) {
  out('fatal', String(e && e.stack || e));
} finally {
  await browser.close();
}

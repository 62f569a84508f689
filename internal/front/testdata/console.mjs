// The web console through a cluster's front, in a real browser (Debian's
// chromium, driven by playwright-core from PLAYWRIGHT): a token's login
// on the page (a front has no socket, so no one-time code), every node's
// pools, the capacity of all of them, a run in flight on one node, killed
// from the page. Prints one JSON line per step; a screenshot goes to
// SHOTS.
const { chromium } = await import(process.env.PLAYWRIGHT);
const out = (k, v) => console.log(JSON.stringify({ k, v }));
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // An alert is the page saying a kill failed.
  page.on('dialog', (d) => { errors.push('dialog: ' + d.message()); d.dismiss(); });
  await page.goto(process.env.BASE + '/console/');
  await page.waitForSelector('#login:not([hidden])');
  await page.fill('#token', process.env.TOKEN);
  await page.click('#login-button');
  await page.waitForSelector('#app:not([hidden])');
  out('who', await page.textContent('#who'));
  // Each node's pool of sh, named by its node.
  await page.waitForFunction(() => document.querySelectorAll('#pools tr[data-tool="sh"]').length >= 3);
  out('pools', await page.$$eval('#pools tr[data-tool="sh"] td:first-child', (tds) => tds.map((td) => td.textContent).sort()));
  // The capacity of every node, summed.
  await page.waitForFunction((n) => (document.querySelector('[data-gauge="sandboxes"]')?.textContent || '').includes('of ' + n), process.env.CAPACITY);
  out('capacity', (await page.textContent('[data-gauge="sandboxes"]')).replace(/\s+/g, ' ').trim());
  // The run in flight, with its node; killed from the page.
  const live = `#runs tr[data-run="${process.env.LIVE_RUN}"]`;
  await page.waitForSelector(live);
  out('live', (await page.textContent(live + ' td:nth-child(3)')).trim());
  await page.screenshot({ path: process.env.SHOTS + '/console-front.png' });
  await page.click(live + ' button');
  await page.waitForSelector(live, { state: 'detached', timeout: 15000 }).catch((e) => { throw new Error(errors.join('; ') + ': ' + e); });
  out('killed', true);
  // The merged audit trail shows the kill.
  await page.waitForSelector('#audit tr[data-kind="run.killed"]');
  out('killrow', true);
  out('errors', errors);
} catch (e) {
  out('fatal', String(e && e.stack || e));
} finally {
  await browser.close();
}

// The page's keys and usage views (`/toolgate/ui/`) driven in headless
// Chromium through playwright-core, as an admin uses them: make a key (its
// secret shown once), see it listed, read the usage table, revoke the key.
//
// Run by tests/it/transcripts_page.rs as
//   node admin_page.mjs CHROMIUM BASE_URL ADMIN_KEY
// Prints one line `RESULT <json>` of what the page showed.

import { open } from './launch.mjs';

const [executablePath, base, adminKey] = process.argv.slice(2);
const { browser, page, errors } = await open(executablePath);
const report = {};
const cells = (selector) => page.$$eval(selector, (rows) => rows.map((r) => [...r.querySelectorAll('td')].map((c) => c.textContent)).filter((r) => r.length));

await page.goto(`${base}/toolgate/ui/`, { waitUntil: 'domcontentloaded' });
await page.fill('#key input', adminKey);
await page.press('#key input', 'Enter');

await page.click('#views button[data-view=keys]');
await page.waitForSelector('#make-key');
await page.fill('#make-key input[name=tenant]', 'team-p');
await page.fill('#make-key input[name=name]', 'page-bot');
await page.fill('#make-key input[name=rpm]', '5');
await page.click('#make-key button');
await page.waitForSelector('.secret code');
report.secret = await page.textContent('.secret code');
await page.waitForSelector('table.grid tr td');
report.listed = await cells('table.grid tr');
// The key works at once.
report.status = await page.evaluate(async ([secret]) => (await fetch('/v1/chat/completions', {
  method: 'POST', headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
})).status, [report.secret]);

await page.click('#views button[data-view=usage]');
await page.waitForSelector('#usage-rows table.grid');
report.usage = await cells('#usage-rows table.grid tr');

await page.click('#views button[data-view=keys]');
await page.waitForSelector('table.grid button.revoke');
await page.click('table.grid button.revoke');
await page.waitForSelector('#view p.empty');
report.afterRevoke = await cells('table.grid tr');
report.secretShownAgain = (await page.content()).includes(report.secret);
report.errors = errors;
await browser.close();
console.log('RESULT ' + JSON.stringify(report));

// The page's usage chart (`/toolgate/ui/`, Usage) in headless Chromium
// through playwright-core, as an operator reads spend over time: the chart
// drawn per day, a line per tenant; the pointer on a day shows each line's
// value in the legend; requests, then per model, then today per hour.
//
// Run by tests/it/transcripts_page.rs as
//   node usage_chart.mjs CHROMIUM BASE_URL ADMIN_KEY DAYS_BACK
// where DAYS_BACK days ago is the other day the Rust test put usage on.
// Prints one line `RESULT <json>` of what the page showed.

import { open } from './launch.mjs';

const [executablePath, base, adminKey, daysBack] = process.argv.slice(2);
const { browser, page, errors } = await open(executablePath, { width: 1280, height: 800 });
const report = {};

await page.goto(`${base}/toolgate/ui/`, { waitUntil: 'domcontentloaded' });
await page.fill('#key input', adminKey);
await page.press('#key input', 'Enter');
await page.waitForFunction(() => document.body.dataset.role === 'admin');

// Redrawn after `action`: waits for the next usage answer to be shown.
async function drawn(action) {
  const before = await page.evaluate(() => document.body.dataset.usageShown || '');
  await action();
  await page.waitForFunction((b) => (document.body.dataset.usageShown || '') !== b, before);
}
// The legend with the pointer on the day (or hour) `back` buckets before
// the range's last one, of `count` buckets.
async function pointAt(back, count) {
  const box = await (await page.$('#usage-chart .u-over')).boundingBox();
  // The last bucket is on the area's right edge: one pixel inside it.
  const x = Math.min(box.x + (box.width * (count - 1 - back)) / (count - 1), box.x + box.width - 1);
  await page.mouse.move(x, box.y + box.height / 2);
  await page.waitForTimeout(100);
  return page.$$eval('#usage-chart .u-legend tr.u-series', (rows) => rows.map((r) => [
    r.querySelector('.u-label')?.textContent, r.querySelector('.u-value')?.textContent,
  ]));
}

await drawn(() => page.click('#views button[data-view=usage]'));
await page.waitForSelector('#usage-chart canvas');
report.range = await page.$eval('#usage-range', (f) => [f.elements.from.value, f.elements.to.value]);
report.series = JSON.parse(await page.$eval('#usage-chart', (c) => c.dataset.series));
// The default range is 30 days, today the last.
report.costToday = await pointAt(0, 30);
report.costBack = await pointAt(Number(daysBack), 30);

await drawn(() => page.selectOption('#usage-range select[name=measure]', 'requests'));
report.requestsToday = await pointAt(0, 30);
report.requestsBack = await pointAt(Number(daysBack), 30);

await drawn(() => page.selectOption('#usage-range select[name=series]', 'model'));
report.modelSeries = JSON.parse(await page.$eval('#usage-chart', (c) => c.dataset.series));

// Today, per hour: 24 points, the pointer on this hour.
const today = new Date().toISOString().slice(0, 10);
await page.fill('#usage-range input[name=from]', today);
await page.fill('#usage-range input[name=to]', today);
await drawn(() => page.selectOption('#usage-range select[name=bucket]', 'hour'));
report.hourLegend = await pointAt(23 - new Date().getUTCHours(), 24);
// Painted: the canvas is not blank.
report.painted = await page.$eval('#usage-chart canvas', (c) => {
  const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let inked = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] > 0) inked += 1;
  return inked;
});
await page.screenshot({ path: process.env.PAGE_SCREENSHOT || '/tmp/usage-chart.png' });
report.errors = errors;
await browser.close();
console.log('RESULT ' + JSON.stringify(report));

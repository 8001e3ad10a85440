// The transcript page (`/toolgate/ui/`) as an operator uses it every day, in
// headless Chromium at 1280×800 through playwright-core: how many chats a
// screen shows, a long title in full on hover, a search by words, a chat's
// header, a key's policy edited in the keys table; then the same page with
// a client key, which offers no admin control.
//
// Run by tests/it/transcripts_page.rs as
//   node daily_page.mjs CHROMIUM BASE_URL ADMIN_KEY CLIENT_KEY
// Prints one line `RESULT <json>` of what the page showed.

import { open } from './launch.mjs';

const [executablePath, base, adminKey, clientKey] = process.argv.slice(2);
const { browser, page, errors } = await open(executablePath, { width: 1280, height: 800 });
const report = {};
const titles = () => page.$$eval('#list .chat .title', (els) => els.map((e) => e.textContent));
async function listed(action) {
  const answered = page.waitForResponse((r) => r.url().includes('/toolgate/api/chats?'));
  await action();
  await answered;
  await page.waitForTimeout(100);
}
async function login(key) {
  await listed(async () => {
    await page.fill('#key input', key);
    await page.press('#key input', 'Enter');
  });
}
const visible = (selector) => page.$$eval(selector, (els) => els.filter((e) => e.offsetParent !== null).length);

await page.goto(`${base}/toolgate/ui/`, { waitUntil: 'domcontentloaded' });
await login(adminKey);

// Rows wholly on the screen, without scrolling.
report.visibleRows = await page.$$eval('#list .chat', (rows) => rows.filter((r) => {
  const box = r.getBoundingClientRect();
  return box.top >= 0 && box.bottom <= window.innerHeight;
}).length);
report.rowHeight = await page.$eval('#list .chat', (r) => r.getBoundingClientRect().height);

// The long title: cut on the screen, whole in its tooltip.
const long = await page.$eval('#list .chat .title[title^="A long question"]', (t) => ({
  title: t.getAttribute('title'), cut: t.scrollWidth > t.clientWidth,
}));
report.longTitle = long;

// Words in any order, not the phrase.
for (const q of ['widgets 42', '42 WIDGETS', 'number "about widgets" 42', '42 gadgets']) {
  await page.fill('#filters input[name=q]', q);
  await listed(() => page.press('#filters input[name=q]', 'Enter'));
  report[`search:${q}`] = await titles();
}

// The chat asked with a request id of the client's own: the header.
await page.fill('#filters input[name=q]', 'tagged request');
await listed(() => page.press('#filters input[name=q]', 'Enter'));
await page.click('#list .chat');
await page.waitForFunction(() => document.querySelector('#chat-head dd[data-field=requests] code')
  && document.querySelector('#chat-head dd[data-field=tenant]').textContent);
report.header = await page.$$eval('#chat-head dd', (dds) => Object.fromEntries(dds.map((d) => [d.dataset.field,
  d.querySelectorAll('code').length ? [...d.querySelectorAll('code')].map((c) => c.textContent) : d.textContent])));
report.openedId = await page.$eval('#list .chat.selected', (r) => r.dataset.id);
const shot = process.env.PAGE_SCREENSHOT || '/tmp/transcripts-daily.png';
await page.fill('#filters input[name=q]', '');
await listed(() => page.press('#filters input[name=q]', 'Enter'));
await page.screenshot({ path: shot });

// Keys: the table's columns, then team-m's key's policy edited.
report.adminControls = { backup: await visible('#views button[data-view=backup]'), tenantFilter: await visible('#filters input[name=tenant]') };
await page.click('#views button[data-view=keys]');
await page.waitForSelector('table.grid button.edit');
report.keyColumns = await page.$$eval('table.grid th', (ths) => ths.map((t) => t.textContent));
const row = () => page.$$eval('table.grid tr', (trs) => trs.slice(1).map((tr) => [...tr.querySelectorAll('td')].map((c) => c.textContent)));
report.keyBefore = await row();
await page.click('table.grid tr:has(td:text-is("team-m")) button.edit');
await page.waitForSelector('#edit-key');
const patched = page.waitForResponse((r) => r.request().method() === 'PATCH');
await page.fill('#edit-key input[name=models]', 'filler-*, demo');
await page.fill('#edit-key input[name=rpm]', '7');
await page.fill('#edit-key input[name=usd]', '2.5');
await page.selectOption('#edit-key select[name=period]', '7d');
await page.fill('#edit-key input[name=expires]', '2031-05-04T10:30');
await page.click('#edit-key button:has-text("Save")');
report.patch = JSON.parse((await patched).request().postData());
await page.waitForSelector('#edit-key', { state: 'detached' });
await page.waitForSelector('table.grid button.edit');
report.keyAfter = await row();

// A client key: its own chats and keys, and no admin control anywhere.
await login(clientKey);
report.clientControls = {
  backup: await visible('#views button[data-view=backup]'),
  tenantFilter: await visible('#filters input[name=tenant]'),
};
await page.click('#views button[data-view=keys]');
await page.waitForSelector('table.grid');
await page.waitForTimeout(300);
report.clientKeys = {
  makeForm: await page.$$eval('#make-key', (e) => e.length),
  edit: await page.$$eval('button.edit', (e) => e.length),
  revoke: await page.$$eval('button.revoke', (e) => e.length),
  rows: (await row()).length,
};
report.role = await page.evaluate(() => document.body.dataset.role);
await page.screenshot({ path: shot.replace(/\.png$/, '-client.png') });
report.errors = errors;
await browser.close();
console.log('RESULT ' + JSON.stringify(report));

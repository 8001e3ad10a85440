// The transcript page (`/toolgate/ui/`) driven in headless Chromium through
// playwright-core, as an operator uses it: the key box, search, filters,
// paging, and a chat's calls, times and errors.
//
// Run by tests/it/transcripts_page.rs as
//   node page.mjs CHROMIUM BASE_URL ADMIN_KEY
// with the gateway already holding the chats the Rust test made. Prints one
// line `RESULT <json>` of what the page showed; the Rust test asserts on it.

import { open } from './launch.mjs';

const [executablePath, base, adminKey] = process.argv.slice(2);
const { browser, page, errors } = await open(executablePath);
const report = {};

const titles = () => page.$$eval('#list .chat .title', (els) => els.map((e) => e.textContent));
const metas = () => page.$$eval('#list .chat .meta', (els) => els.map((e) => e.textContent));
// Runs `action` and waits for the chat list it asks for to be shown.
async function listed(action) {
  const answered = page.waitForResponse((r) => r.url().includes('/toolgate/api/chats?'));
  await action();
  await answered;
  await page.waitForTimeout(100);
}

// The key box is there before any answer asked for a key.
await page.goto(`${base}/toolgate/ui/`, { waitUntil: 'domcontentloaded' });
report.keyBoxVisibleAtOnce = await page.isVisible('#key input');
await page.waitForSelector('#key.needed');
report.askedForKey = await page.$eval('#key', (e) => e.classList.contains('needed'));

await listed(async () => {
  await page.fill('#key input', adminKey);
  await page.press('#key input', 'Enter');
});
report.firstPage = (await titles()).length;
report.moreButton = await page.isVisible('#list button.more');
await listed(() => page.click('#list button.more'));
report.afterMore = (await titles()).length;
report.moreAfterLastPage = await page.isVisible('#list button.more');
report.singular = (await metas()).some((m) => m.includes('· 1 tool call ·'));
report.plural = (await metas()).some((m) => /· [02-9]\d* tool calls ·/.test(m));

await page.fill('#filters input[name=q]', 'needle in the haystack');
await listed(() => page.press('#filters input[name=q]', 'Enter'));
report.searched = await titles();

// A call's result is searched too.
await page.fill('#filters input[name=q]', '35');
await listed(() => page.press('#filters input[name=q]', 'Enter'));
report.searchedResult = await titles();

await page.fill('#filters input[name=q]', '');
await listed(() => page.check('#filters input[name=errors]'));
report.errorsOnly = await titles();
report.marks = await page.$$eval('#list .chat .mark', (els) => els.map((e) => e.textContent));

await listed(() => page.uncheck('#filters input[name=errors]'));
await page.fill('#filters input[name=tenant]', 'team-b');
await listed(() => page.press('#filters input[name=tenant]', 'Enter'));
report.tenantB = await metas();
await page.fill('#filters input[name=tenant]', '');

// A failed chat: the error and what the model wrote.
await page.fill('#filters input[name=provider]', 'broken');
await listed(() => page.press('#filters input[name=provider]', 'Enter'));
await page.click('#list .chat');
await page.waitForSelector('#view .error');
report.error = await page.textContent('#view .error');
report.raw = await page.textContent('#view pre.raw').catch(() => null);

// A chat with a gateway call: its duration and the messages' times.
await page.fill('#filters input[name=provider]', 'demo');
await page.fill('#filters input[name=q]', 'calculator');
await listed(() => page.press('#filters input[name=q]', 'Enter'));
await page.click('#list .chat');
await page.waitForSelector('#view .call.done .took');
report.took = await page.textContent('#view .call.done .took');
report.times = await page.$$eval('#view time.at', (els) => els.length);
await page.screenshot({ path: process.env.PAGE_SCREENSHOT || '/tmp/transcripts-page.png' });

report.pageErrors = errors;
console.log('RESULT ' + JSON.stringify(report));
await browser.close();

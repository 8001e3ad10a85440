// Headless Chromium for the page sessions (page.mjs, admin_page.mjs):
// launched from the path the Rust test gives, page errors collected.

import { chromium } from 'playwright-core';

export async function open(executablePath) {
  const browser = await chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  return { browser, page, errors };
}

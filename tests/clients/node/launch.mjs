// Headless Chromium for the page sessions (page.mjs, admin_page.mjs,
// daily_page.mjs, usage_chart.mjs): launched from the path the Rust test
// gives, page errors and Content-Security-Policy refusals collected.

import { chromium } from 'playwright-core';

export async function open(executablePath, viewport = { width: 1200, height: 800 }) {
  const browser = await chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  const page = await browser.newPage({ viewport });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && m.text().includes('Content Security Policy')) errors.push(m.text());
  });
  return { browser, page, errors };
}

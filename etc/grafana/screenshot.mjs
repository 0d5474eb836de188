// Screenshot of the live dashboard after it has scraped for a while in real time (headless
// Chromium's --screenshot fires at page load, before any rate exists). Drives Chromium over
// the DevTools protocol. Usage:
//   node --experimental-websocket etc/grafana/screenshot.mjs URL OUT.png [SECONDS]
import { spawn } from "node:child_process";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, out, seconds = "40"] = process.argv.slice(2);
if (!url || !out) {
  console.error("usage: screenshot.mjs URL OUT.png [SECONDS]");
  process.exit(2);
}
const port = 9300 + Math.floor(Math.random() * 600);
const chromium = spawn("chromium", [
  "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
  "--window-size=1400,1000", `--remote-debugging-port=${port}`,
  `--user-data-dir=${mkdtempSync(join(tmpdir(), "dash-"))}`, url,
], { stdio: "ignore" });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
try {
  let page;
  for (let i = 0; i < 100 && !page; i++) {
    await sleep(200);
    try {
      const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
      page = targets.find((t) => t.type === "page");
    } catch { /* not listening yet */ }
  }
  if (!page) throw new Error("chromium did not open the page");
  await sleep(Number(seconds) * 1000);
  const ws = new WebSocket(page.webSocketDebuggerUrl);
  await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
  const shot = await new Promise((resolve) => {
    ws.onmessage = (m) => {
      const reply = JSON.parse(m.data);
      if (reply.id === 1) resolve(reply.result.data);
    };
    ws.send(JSON.stringify({ id: 1, method: "Page.captureScreenshot", params: { format: "png" } }));
  });
  writeFileSync(out, Buffer.from(shot, "base64"));
  console.log(`wrote ${out}`);
  ws.close();
} finally {
  chromium.kill();
}

// Headless Chromium for the page checks: Debian's chromium driven by
// playwright-core, in a throw-away profile directory. launch() returns
// { context, close } or { skip: why } when Chromium cannot run here.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");

const CHROMIUM = process.env.JPROF_CHROMIUM || "/usr/bin/chromium";

async function launch(extraArgs = []) {
  let playwright;
  try {
    playwright = require("playwright-core");
  } catch (e) {
    return { skip: "playwright-core not installed (npm ci in tests/browser): " + e.message };
  }
  if (!fs.existsSync(CHROMIUM))
    return { skip: CHROMIUM + " not found (apt-get install chromium)" };
  const profileDir = fs.mkdtempSync(path.join(os.tmpdir(), "jprof-chromium-"));
  const context = await playwright.chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1200, height: 700 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run"].concat(extraArgs),
  });
  return {
    context,
    close: async () => {
      await context.close();
      fs.rmSync(profileDir, { recursive: true, force: true });
    },
  };
}

// Runs a check's main() (which fills result and failures) and prints the
// one JSON line the Python side reads; exit 0, 1 on failures, or main's own
// code (77: skipped).
function run(main) {
  main().then((code) => process.exit(code), (e) => {
    console.log(JSON.stringify({ failures: ["exception: " + (e && e.stack || e)] }));
    process.exit(1);
  });
}

function report(result, failures) {
  result.failures = failures;
  console.log(JSON.stringify(result));
  return failures.length ? 1 : 0;
}

// A check that cannot run here: the JSON line, and exit code 77.
function skip(why) {
  console.log(JSON.stringify({ skip: why }));
  return 77;
}

// The failures a check collects, and check(cond, msg) to add one.
function checker() {
  const failures = [];
  return { failures, check: (cond, msg) => { if (!cond) failures.push(msg); } };
}

module.exports = { launch, run, report, skip, checker };

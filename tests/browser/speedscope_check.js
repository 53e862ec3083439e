// Loads a speedscope file into speedscope itself (the npm package's release
// build, served from node_modules on a local HTTP port: the app fetches
// #profileURL only over http) in headless Chromium driven by
// playwright-core, and checks what a person would see. Prints one JSON
// object with the measurements; exits 0 when every check passed, 1 when one
// failed, 77 when Chromium cannot run here.
//
//   node speedscope_check.js --file FILE [--profile NAME] [--frame NAME]...
//        [--screenshot OUT.png]
//
// --profile NAME  the profile (thread) the toolbar must show when the file
//                 opens (the file's activeProfileIndex)
// --frame NAME    a function the Sandwich view's table must list (repeat)
"use strict";
const fs = require("fs");
const http = require("http");
const path = require("path");
const { launch, run, report, skip, checker } = require("./chromium");

const RELEASE = path.join(__dirname, "node_modules", "speedscope", "dist", "release");
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                ".json": "application/json", ".png": "image/png", ".woff2": "font/woff2",
                ".wasm": "application/wasm", ".ico": "image/x-icon", ".txt": "text/plain" };

function parseArgs(argv) {
  const a = { file: null, profile: null, frames: [], screenshot: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === "--file") a.file = argv[++i];
    else if (k === "--profile") a.profile = argv[++i];
    else if (k === "--frame") a.frames.push(argv[++i]);
    else if (k === "--screenshot") a.screenshot = argv[++i];
    else throw new Error("unknown argument " + k);
  }
  if (!a.file) throw new Error("--file FILE is required");
  return a;
}

// The app's files, and the profile under /profile/<its name>.
function serve(file) {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url.split(/[?#]/)[0]);
    let p;
    if (url === "/profile/" + path.basename(file)) p = file;
    else p = path.join(RELEASE, path.normalize(url === "/" ? "/index.html" : url));
    if (!p.startsWith(RELEASE) && p !== file) {
      res.writeHead(403);
      return res.end();
    }
    fs.readFile(p, (err, data) => {
      if (err) {
        res.writeHead(404);
        return res.end();
      }
      res.writeHead(200, { "Content-Type": TYPES[path.extname(p)] || "application/octet-stream" });
      res.end(data);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(path.join(RELEASE, "index.html")))
    return skip("speedscope not installed (npm ci in tests/browser)");
  const browser = await launch(["--use-gl=swiftshader", "--enable-unsafe-swiftshader"]);
  if (browser.skip) return skip(browser.skip);
  const { failures, check } = checker();
  const result = { file: args.file, bytes: fs.statSync(args.file).size };
  const server = await serve(path.resolve(args.file));
  const base = "http://127.0.0.1:" + server.address().port;
  const context = browser.context;
  try {
    const page = context.pages()[0] || await context.newPage();
    const errors = [], requests = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    page.on("pageerror", (e) => errors.push("page error: " + e.message));
    page.on("dialog", (d) => { errors.push("dialog: " + d.message()); d.dismiss(); });
    // Everything comes from the local server: any other request is a failure.
    await page.route("**/*", (route) => {
      const url = route.request().url();
      if (url.startsWith(base + "/")) return route.continue();
      requests.push(url);
      return route.abort();
    });
    const t0 = Date.now();
    const url = base + "/index.html#profileURL=" +
      encodeURIComponent(base + "/profile/" + path.basename(args.file)) + "&view=sandwich";
    await page.goto(url, { waitUntil: "load", timeout: 120000 });
    // Loaded: the Sandwich view's table header is drawn (or an error shown).
    await page.waitForFunction(() => /Symbol Name|went wrong|Failed|Error/i.test(document.body.innerText),
                               null, { timeout: 120000 });
    result.load_ms = Date.now() - t0;
    const body = await page.evaluate(() => document.body.innerText);
    check(/Symbol Name/.test(body), "speedscope shows no Sandwich table: " + body.slice(0, 400));
    // The toolbar: the view tabs, then the active profile's name ("name" or
    // "name (i/n)" when the file has several), then the buttons.
    const lines = body.split("\n");
    const tab = lines.findIndex((l) => l.includes("Sandwich"));
    result.toolbar = tab >= 0 && lines[tab + 1] ? lines[tab + 1] : null;
    const idx = result.toolbar && result.toolbar.match(/ \((\d+)\/(\d+)\)$/);
    result.profile = idx ? result.toolbar.slice(0, -idx[0].length) : result.toolbar;
    result.profiles = idx ? Number(idx[2]) : (result.toolbar ? 1 : 0);
    if (args.profile)
      check(result.profile === args.profile,
            "toolbar does not show profile " + JSON.stringify(args.profile) + ": " + result.toolbar);
    if (args.frames.length) {
      // The Sandwich view's table: one row per function, "total, self, name"
      // after the "Symbol Name" header.
      const cells = body.slice(body.indexOf("Symbol Name") + 11).split(/[\t\n]/)
        .map((c) => c.trim()).filter((c) => c && !/^[\d.]+\w*s \(/.test(c));
      result.functions = cells.length;
      result.top_functions = cells.slice(0, 5);
      for (const f of args.frames)
        check(cells.includes(f), "the Sandwich view does not list " + JSON.stringify(f));
    }
    const png = await page.screenshot();
    if (args.screenshot) fs.writeFileSync(args.screenshot, png);
    result.errors = errors;
    result.requests = requests;
    check(errors.length === 0, "console errors: " + errors.join("; "));
    check(requests.length === 0, "requests outside the local server: " + requests.join(", "));
  } finally {
    await browser.close();
    server.close();
  }
  return report(result, failures);
}

run(main);

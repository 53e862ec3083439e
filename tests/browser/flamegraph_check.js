// Opens a jprofd flame graph page in headless Chromium (Debian's, driven by
// playwright-core) and checks what a person would see. Prints one JSON
// object with the measurements; exits 0 when every check passed, 1 when one
// failed, 77 when Chromium cannot run here.
//
//   node flamegraph_check.js --html FILE [--expect NAME] [--empty]
//        [--screenshot OUT.png] [--names-json FILE] [--view TYPE=NAME ...]
//        [--first-screen]
//
// --expect NAME   a frame that must be drawn, found by search and highlighted
// --empty         the page must say "no samples"
// --names-json    a JSON array of names that must all be in the page's frames
// --view TYPE=NAME (repeatable) a profile of several events: the selector
//                 offers TYPE, and once TYPE is chosen frame NAME is drawn
//                 and the root frame spans that value's total
// --first-screen  opened in a 1400x900 window, the first screen (before any
//                 scrolling) shows the root frame, and labelled frames
//                 below it cover at least 80% of the page's width; the
//                 screenshot is then of that first screen
"use strict";
const fs = require("fs");
const path = require("path");
const { launch, run, report, skip, checker } = require("./chromium");

function parseArgs(argv) {
  const a = { html: null, expect: null, empty: false, screenshot: null, namesJson: null, views: [],
    firstScreen: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (k === "--html") a.html = argv[++i];
    else if (k === "--expect") a.expect = argv[++i];
    else if (k === "--empty") a.empty = true;
    else if (k === "--first-screen") a.firstScreen = true;
    else if (k === "--screenshot") a.screenshot = argv[++i];
    else if (k === "--names-json") a.namesJson = argv[++i];
    else if (k === "--view") {
      const v = argv[++i], eq = v.indexOf("=");
      a.views.push({ type: v.slice(0, eq), name: v.slice(eq + 1) });
    }
    else throw new Error("unknown argument " + k);
  }
  if (!a.html) throw new Error("--html FILE is required");
  return a;
}

// In the page: what the window shows without scrolling. A frame counts when
// its whole row is inside the window and not under the sticky header. The
// root frame (it always spans the width) is reported but not counted;
// labelled_px sums the other frames' widths, covered_px is how much of the
// width they cover together (a column of a hundred frames covers one
// column's width).
function firstScreen() {
  const c = document.getElementById("canvas").getBoundingClientRect();
  const top = document.querySelector("header").getBoundingClientRect().bottom;
  const bottom = window.innerHeight;
  // Pages before labelled/h were in frames(): rows of 17 px, a label over
  // three characters' width (11 px monospace).
  const all = window.jprofFlame.frames().map((f) => Object.assign(
    { h: 16, labelled: f.w > 3 * 6.6 }, f));
  const seen = all.filter((f) => c.top + f.y >= top && c.top + f.y + f.h <= bottom);
  const root = seen.find((f) => f.depth === 0) || null;
  const lab = seen.filter((f) => f.depth > 0 && f.labelled);
  const spans = lab.map((f) => [f.x, f.x + f.w]).sort((a, b) => a[0] - b[0]);
  let covered = 0, reach = -Infinity;
  for (const [a, b] of spans) {
    if (b <= reach) continue;
    covered += b - Math.max(a, reach);
    reach = b;
  }
  return {
    page_width: document.documentElement.clientWidth, page_height: document.documentElement.scrollHeight,
    window_height: bottom, header_bottom: top, scroll_y: window.scrollY,
    frames_visible: seen.length, labelled_visible: lab.length, root_visible: !!root, root,
    labelled_px: lab.reduce((s, f) => s + f.w, 0), covered_px: covered,
    depths_visible: seen.length ? [Math.min(...seen.map((f) => f.depth)), Math.max(...seen.map((f) => f.depth))] : [],
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const browser = await launch();
  if (browser.skip) return skip(browser.skip);
  const { failures, check } = checker();
  const result = { html: args.html, bytes: fs.statSync(args.html).size };
  const context = browser.context;
  try {
    const page = context.pages()[0] || await context.newPage();
    const errors = [], requests = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    page.on("pageerror", (e) => errors.push("page error: " + e.message));
    // A self-contained page loads nothing: every request but the file is a failure.
    await page.route("**/*", (route) => {
      const url = route.request().url();
      if (url.startsWith("file:")) return route.continue();
      requests.push(url);
      return route.abort();
    });
    if (args.firstScreen) await page.setViewportSize({ width: 1400, height: 900 });
    const t0 = Date.now();
    await page.goto("file://" + path.resolve(args.html), { waitUntil: "load", timeout: 120000 });
    await page.waitForFunction(() => window.jprofFlame !== undefined, null, { timeout: 120000 });
    result.load_ms = Date.now() - t0;
    result.title = await page.title();
    result.nodes = await page.evaluate(() => window.jprofFlame.nodes);
    result.total = await page.evaluate(() => window.jprofFlame.total);
    // Measured before anything below scrolls the page.
    if (args.firstScreen && !args.empty) {
      // Two frames: whatever the page does on load has been laid out.
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
      const fs0 = await page.evaluate(firstScreen);
      Object.assign(result, { first_screen: fs0 });
      const pageW = fs0.page_width;
      check(fs0.root_visible, "the root frame is not on the first screen (page " + fs0.page_height +
            " px high, scrolled to " + fs0.scroll_y + ", depths " + fs0.depths_visible.join("-") + " in view)");
      check(fs0.labelled_px >= 0.8 * pageW, "labelled frames on the first screen sum to " +
            fs0.labelled_px.toFixed(0) + " px, under 80% of the page's " + pageW + " px");
      check(fs0.covered_px >= 0.8 * pageW, "labelled frames on the first screen cover " +
            fs0.covered_px.toFixed(0) + " px of the width, under 80% of the page's " + pageW + " px");
      result.first_screen_png = await page.screenshot();
      // The switch to an icicle shows its root (now at the top), and the
      // way back the flame's; so does Reset after scrolling away.
      for (const [inv, what] of [[true, "icicle"], [false, "flame"]]) {
        await page.evaluate((v) => window.jprofFlame.setInverted(v), inv);
        const s = await page.evaluate(firstScreen);
        check(s.root_visible && s.covered_px >= 0.8 * pageW,
              "after switching to " + what + " the root is " + (s.root_visible ? "" : "not ") +
              "in view, labelled frames cover " + s.covered_px.toFixed(0) + " px");
      }
      await page.evaluate(() => { window.scrollTo(0, 0); window.jprofFlame.reset(); });
      check((await page.evaluate(firstScreen)).root_visible, "Reset does not bring the root back in view");
    }

    if (args.empty) {
      const text = await page.evaluate(() => document.body.innerText);
      check(/no samples/.test(result.title), "title does not say 'no samples': " + result.title);
      check(/no samples/.test(text), "the page does not say 'no samples'");
      check(result.total === 0, "empty page total is " + result.total);
    } else {
      const frames = await page.evaluate(() => window.jprofFlame.frames());
      result.frames_drawn = frames.length;
      const root = frames.find((f) => f.name === "all" && f.depth === 0);
      check(root && root.w > 1000, "root frame 'all' is not drawn full width: " + JSON.stringify(root));
      check(root && root.total === result.total, "root frame total differs from the page total");
      if (args.expect) {
        const hot = frames.filter((f) => f.name === args.expect);
        check(hot.length > 0, "frame '" + args.expect + "' is not drawn");
        result.expect_width_px = hot.reduce((s, f) => s + f.w, 0);
        const t1 = Date.now();
        const s = await page.evaluate((q) => window.jprofFlame.search(q), args.expect);
        result.search_ms = Date.now() - t1;
        result.search = s;
        check(s.matches > 0 && s.percent > 0, "search found nothing: " + JSON.stringify(s));
        const after = await page.evaluate(() => window.jprofFlame.frames());
        const hi = after.filter((f) => f.name === args.expect);
        check(hi.length > 0 && hi.every((f) => f.highlighted), "search did not highlight '" + args.expect + "'");
        check(after.filter((f) => f.highlighted).every((f) => f.name.toLowerCase().includes(args.expect.toLowerCase())),
              "search highlighted frames that do not match");
        const shown = await page.evaluate(() => window.jprofFlame.matchedText());
        result.matched_text = shown;
        check(shown.includes(s.percent.toFixed(2) + "%"), "matched percentage not shown: " + shown);
        // Zoom into the hot frame: it then spans the whole width.
        const t2 = Date.now();
        await page.evaluate((q) => window.jprofFlame.zoom(q), args.expect);
        result.zoom_ms = Date.now() - t2;
        const z = (await page.evaluate(() => window.jprofFlame.frames())).filter((f) => f.name === args.expect);
        check(z.some((f) => f.w > 1000), "zoom did not widen '" + args.expect + "'");
        await page.evaluate(() => window.jprofFlame.reset());
        await page.evaluate(() => window.jprofFlame.setInverted(true));
        const inv = await page.evaluate(() => window.jprofFlame.frames());
        const invRoot = inv.find((f) => f.depth === 0);
        check(invRoot && invRoot.y === 0, "icicle view does not put the root at the top");
        await page.evaluate(() => window.jprofFlame.setInverted(false));
        // Hovering the hot frame shows a tooltip with its name and samples.
        const f0 = frames.filter((f) => f.name === args.expect).sort((a, b) => b.w - a.w)[0];
        if (f0) {
          // Bring the frame into the viewport first: deep graphs are taller.
          await page.evaluate((y) => {
            const top = document.getElementById("canvas").getBoundingClientRect().top + window.scrollY;
            window.scrollTo(0, Math.max(0, top + y - 200));
          }, f0.y);
          const box = await page.locator("#canvas").boundingBox();
          await page.mouse.move(box.x + f0.x + f0.w / 2, box.y + f0.y + 5);
          const tipText = await page.locator("#tip").innerText();
          result.tooltip = tipText;
          check(tipText.includes(args.expect) && /samples/.test(tipText) && /%/.test(tipText),
                "tooltip does not show name, samples and percent: " + tipText);
        }
        await page.evaluate(() => window.jprofFlame.search(""));
      }
      if (args.namesJson) {
        const want = JSON.parse(fs.readFileSync(args.namesJson, "utf8"));
        const have = new Set(frames.map((f) => f.name));
        for (const n of want) check(have.has(n), "name not in the page's frames: " + JSON.stringify(n));
      }
      if (args.views.length) {
        result.views = await page.evaluate(() => window.jprofFlame.views());
        const shownOptions = await page.locator("#view option").count();
        check(await page.locator("#view").isVisible(), "no value selector on a page of several events");
        check(shownOptions === result.views.length, "selector has " + shownOptions + " options");
        result.view_totals = {};
        for (const v of args.views) {
          check(result.views.includes(v.type), "selector lacks " + v.type + ": " + result.views);
          // As a person would: pick it in the selector.
          const k = result.views.indexOf(v.type);
          if (k >= 0) await page.selectOption("#view", String(k));
          const cur = await page.evaluate(() => window.jprofFlame.view());
          result.view_totals[v.type] = cur && cur.total;
          check(cur && cur.type === v.type && cur.total > 0, "view after choosing " + v.type + ": " + JSON.stringify(cur));
          const fr = await page.evaluate(() => window.jprofFlame.frames());
          const root = fr.find((f) => f.name === "all" && f.depth === 0);
          check(root && cur && root.total === cur.total && root.w > 1000,
                v.type + ": root frame is not the view's total drawn full width: " + JSON.stringify(root));
          check(fr.some((f) => f.name === v.name && f.w > 1), v.type + ": frame " + v.name + " is not drawn");
        }
      }
    }

    // Screenshot, decoded by Chromium itself: count distinct colours.
    // Crop below the graph: the docs show the page, not empty space.
    const bottom = await page.evaluate(() => {
      const c = document.getElementById("chart").getBoundingClientRect();
      return Math.ceil(c.bottom) + 10;
    });
    const png = result.first_screen_png ||
      await page.screenshot({ clip: { x: 0, y: 0, width: 1200, height: Math.min(700, Math.max(200, bottom)) } });
    delete result.first_screen_png;
    if (args.screenshot) fs.writeFileSync(args.screenshot, png);
    result.colours = await page.evaluate(async (b64) => {
      const img = new Image();
      img.src = "data:image/png;base64," + b64;
      await img.decode();
      const c = document.createElement("canvas");
      c.width = img.width; c.height = img.height;
      const g = c.getContext("2d");
      g.drawImage(img, 0, 0);
      const px = g.getImageData(0, 0, c.width, c.height).data, seen = new Set();
      for (let i = 0; i < px.length; i += 4) seen.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
      return seen.size;
    }, png.toString("base64"));
    check(result.colours >= (args.empty ? 2 : 8), "screenshot looks blank: " + result.colours + " colours");
    result.errors = errors;
    result.requests = requests;
    check(errors.length === 0, "console errors: " + errors.join("; "));
    check(requests.length === 0, "the page made network requests: " + requests.join(", "));
  } finally {
    await browser.close();
  }
  return report(result, failures);
}

run(main);

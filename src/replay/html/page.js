// kubecast replay --html: draws the timeline from the JSON island #timeline-data. Every text
// from the data goes into the page through textContent, never as markup. The page's state
// can be set from the address's fragment: #select=EVENT_ID&at=TIME&filter=TEXT&kind=KIND
// &cluster=NAME&from=MS&to=MS (TIME: RFC 3339 or milliseconds). A record of more than one
// cluster (a fleet) groups the lanes by cluster first and names the cluster everywhere.
"use strict";
(function () {
  const doc = JSON.parse(document.getElementById("timeline-data").textContent);
  const lanes = doc.lanes;
  const clusterNames = [...new Set(lanes.map((l) => l.cluster))];
  const fleet = clusterNames.length > 1;
  const BUCKETS = 50; // marks per lane above which a zoomed-out lane shows buckets

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const iso = (ms) => new Date(ms).toISOString();

  // The keys of the data are data: they are read and written as own properties only, so
  // that `__proto__`, `constructor` or `prototype` in an object never reach a prototype (an
  // assignment to `o.__proto__` would change o's, and reading it would give Object.prototype).
  const own = (o, k) => o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k);
  const get = (o, k) => (own(o, k) ? o[k] : undefined);
  function put(o, k, v) {
    Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  }

  // Versions: the first one, then each change's merge patch (RFC 7386) in order.
  function apply(target, patch) {
    if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return clone(patch);
    const out = target !== null && typeof target === "object" && !Array.isArray(target) ? target : {};
    for (const [k, v] of Object.entries(patch)) {
      if (v === null) delete out[k]; else put(out, k, apply(get(out, k), v));
    }
    return out;
  }
  const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
  const cache = new Map(); // lane index -> {i, obj}
  function version(li, i) {
    const lane = lanes[li];
    let c = cache.get(li);
    if (!c || c.i > i) c = { i: 0, obj: clone(lane.first) };
    let obj = clone(c.obj);
    for (let k = c.i + 1; k <= i; k++) if ("p" in lane.marks[k]) obj = apply(obj, lane.marks[k].p);
    // Callers only read it; the next call clones it before patching.
    cache.set(li, { i, obj });
    return obj;
  }

  // What changed between two versions, path by path.
  function diff(a, b, path, out) {
    const isObj = (v) => v !== null && typeof v === "object";
    if (isObj(a) && isObj(b) && Array.isArray(a) === Array.isArray(b)) {
      const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
      for (const k of keys) {
        const p = Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
        if (!own(a, k)) out.push({ kind: "added", path: p, new: get(b, k) });
        else if (!own(b, k)) out.push({ kind: "removed", path: p, old: get(a, k) });
        else diff(get(a, k), get(b, k), p, out);
      }
    } else if (JSON.stringify(a) !== JSON.stringify(b)) {
      out.push({ kind: "changed", path: path || "(the whole object)", old: a, new: b });
    }
    return out;
  }

  // resourceVersions compare as numbers when both are (etcd's), else not at all.
  function rvLess(a, b) {
    return /^\d+$/.test(a) && /^\d+$/.test(b) && BigInt(a) < BigInt(b);
  }

  // The header.
  const header = el("header", { id: "summary" });
  header.append(el("h1", {}, `kubecast replay: ${doc.header.topic}`));
  header.append(el("p", { id: "range" }, doc.header.range));
  const span = doc.span || [0, 1];
  header.append(el("p", { class: "muted", id: "span" },
    doc.span ? `events from ${iso(span[0])} to ${iso(span[1])}` : "no events in the range"));
  const counts = el("ul", { class: "counts", id: "counts" });
  for (const [ty, n] of Object.entries(doc.counts)) {
    const li = el("li", { "data-type": ty, "data-count": String(n) });
    li.append(el("span", { class: `dot t-${ty}` }), `${ty}: ${n}`);
    counts.append(li);
  }
  header.append(counts);
  if (fleet) {
    const per = el("ul", { class: "counts", id: "cluster-counts" });
    for (const [c, byType] of Object.entries(doc.clusters)) {
      const n = Object.values(byType).reduce((a, b) => a + b, 0);
      const words = Object.entries(byType).map(([ty, k]) => `${ty} ${k}`).join(", ");
      per.append(el("li", { "data-cluster": c, "data-count": String(n) }, `${c || "(no cluster)"}: ${n} (${words})`));
    }
    header.append(per);
  }
  if (doc.header.verdict) {
    const [passed, line] = doc.header.verdict;
    header.append(el("p", { id: "verdict", class: passed ? "passed" : "failed" }, line));
  }
  document.body.append(header);

  // Controls.
  const controls = el("div", { id: "controls" });
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter lanes by name (or namespace/name)" });
  const kind = el("select", { id: "kind" });
  kind.append(el("option", { value: "" }, "every kind"));
  for (const k of [...new Set(lanes.map((l) => l.kind))]) kind.append(el("option", { value: k }, k));
  const cluster = el("select", { id: "cluster" });
  cluster.append(el("option", { value: "" }, "every cluster"));
  for (const c of clusterNames) cluster.append(el("option", { value: c }, c || "(no cluster)"));
  const zin = el("button", { id: "zoom-in", type: "button" }, "zoom in");
  const zout = el("button", { id: "zoom-out", type: "button" }, "zoom out");
  const zreset = el("button", { id: "zoom-reset", type: "button" }, "whole range");
  const windowText = el("span", { id: "window" });
  controls.append(filter, kind);
  if (fleet) controls.append(cluster);
  controls.append(zin, zout, zreset, windowText);
  document.body.append(controls);

  // Lanes, grouped by cluster (in a fleet), kind and namespace (the data comes sorted that
  // way).
  const timeline = el("div", { id: "timeline" });
  const axis = el("div", { id: "axis" });
  timeline.append(axis);
  const tracks = [];
  let group = null;
  let section = null;
  lanes.forEach((lane, li) => {
    if (fleet && (!section || section.name !== lane.cluster)) {
      section = { name: lane.cluster, node: el("div", { class: "cluster", "data-cluster": lane.cluster }) };
      section.node.append(el("h2", { class: "cluster-title" }, `cluster ${lane.cluster || "(none)"}`));
      timeline.append(section.node);
      group = null;
    }
    const key = `${lane.kind} (${lane.apiVersion})${lane.ns ? " · " + lane.ns : ""}`;
    if (!group || group.key !== key) {
      group = { key, node: el("div", { class: "group", "data-kind": lane.kind, "data-namespace": lane.ns, "data-cluster": lane.cluster }) };
      group.node.append(el("div", { class: "group-title" }, key));
      (section ? section.node : timeline).append(group.node);
    }
    const row = el("div", { class: "lane", "data-uid": lane.uid, "data-name": lane.name, "data-kind": lane.kind, "data-namespace": lane.ns, "data-cluster": lane.cluster });
    row.append(el("div", { class: "lane-label", title: `${lane.ns ? lane.ns + "/" : ""}${lane.name} (uid ${lane.uid})` }, lane.name));
    const track = el("div", { class: "track", "data-lane": String(li) });
    row.append(track);
    group.node.append(row);
    tracks.push({ row, track, group: group.node, section: section && section.node });
  });
  document.body.append(timeline);

  // The panels: the selected change, and the objects at a moment.
  const panels = el("div", { id: "panels" });
  const details = el("section", { id: "details" });
  details.append(el("h2", {}, "Selected change"));
  const detailTitle = el("p", { id: "detail-title", class: "muted" }, "Click a mark to see the object at that version and what changed.");
  const diffTable = el("table", { id: "diff" });
  const objectPre = el("pre", { id: "object" });
  details.append(detailTitle, diffTable, objectPre);
  const stateSection = el("section", { id: "state" });
  stateSection.append(el("h2", {}, "Objects at a moment"));
  const slider = el("input", { type: "range", id: "slider", min: String(span[0]), max: String(span[1]), step: "1", value: String(span[1]) });
  const sliderTime = el("p", { id: "slider-time", class: "muted" });
  const stateTable = el("table", { id: "state-table" });
  stateSection.append(slider, sliderTime, stateTable);
  panels.append(details, stateSection);
  document.body.append(panels);

  // Drawing the visible window.
  const pad = Math.max(1000, (span[1] - span[0]) * 0.02);
  const whole = { from: span[0] - pad, to: span[1] + pad };
  let view = { ...whole };
  let selected = null;
  const pct = (t) => ((t - view.from) / (view.to - view.from)) * 100;

  function draw() {
    windowText.textContent = `${iso(view.from)} to ${iso(view.to)}`;
    axis.textContent = "";
    for (let k = 0; k <= 4; k++) {
      const t = view.from + ((view.to - view.from) * k) / 4;
      const tick = el("span", {}, iso(t).replace("T", " ").replace(/\.\d+Z$/, "Z"));
      tick.style.left = `${k * 25}%`;
      axis.append(tick);
    }
    tracks.forEach(({ track }, li) => {
      const lane = lanes[li];
      track.textContent = "";
      for (const a of lane.alerts) {
        const to = a.to === undefined ? view.to : a.to;
        if (to < view.from || a.from > view.to) continue;
        const bar = el("div", { class: a.to === undefined ? "alert-bar open" : "alert-bar", "data-rule": a.rule, "data-id": a.id,
          title: `alert ${a.rule}: firing ${iso(a.from)}${a.to === undefined ? ", still firing" : ", resolved " + iso(a.to)}` });
        bar.style.left = `${Math.max(0, pct(a.from))}%`;
        bar.style.width = `${Math.max(0.3, Math.min(100, pct(to)) - Math.max(0, pct(a.from)))}%`;
        track.append(bar);
      }
      const visible = [];
      lane.marks.forEach((m, i) => { if (m.t >= view.from && m.t <= view.to) visible.push(i); });
      if (visible.length > BUCKETS) {
        const buckets = new Map();
        for (const i of visible) {
          const b = Math.floor((pct(lane.marks[i].t) / 100) * BUCKETS);
          if (!buckets.has(b)) buckets.set(b, []);
          buckets.get(b).push(i);
        }
        for (const [b, is] of buckets) {
          const last = lane.marks[is[is.length - 1]];
          const m = el("div", { class: "mark agg", "data-count": String(is.length), "data-id": last.id,
            title: `${is.length} changes; click for the last (resourceVersion ${last.rv}); zoom in for each` });
          m.style.left = `${((b + 0.5) / BUCKETS) * 100}%`;
          track.append(m);
        }
      } else {
        for (const i of visible) {
          const m = lane.marks[i];
          const mark = el("div", { class: `mark t-${m.ty}${selected === m.id ? " selected" : ""}`, "data-id": m.id, "data-rv": m.rv, "data-type": m.ty,
            title: `${m.ty} at ${m.tt}, resourceVersion ${m.rv}` });
          mark.style.left = `${pct(m.t)}%`;
          track.append(mark);
        }
      }
      for (const g of lane.gaps) {
        const at = lane.marks.find((m) => m.id === g.id);
        const t = at ? at.t : lane.marks.length ? lane.marks[0].t : span[0];
        if (t < view.from || t > view.to) continue;
        const gap = el("div", { class: "mark gap", "data-missing-rv": g.rv, "data-id": g.id,
          title: `gap: event ${g.id} links to resourceVersion ${g.rv}, which is not in the topic` }, `missing ${g.rv}`);
        gap.style.left = `${pct(t)}%`;
        track.append(gap);
      }
    });
  }

  // Filtering lanes.
  function refilter() {
    const text = filter.value.trim().toLowerCase();
    const k = kind.value;
    const c = cluster.value;
    const shown = new Set();
    tracks.forEach(({ row, group, section }, li) => {
      const lane = lanes[li];
      // By name; with a `/` in the text, by namespace/name.
      const hay = text.includes("/") ? `${lane.ns}/${lane.name}` : lane.name;
      const show = (!k || lane.kind === k) && (!c || lane.cluster === c) && (!text || hay.toLowerCase().includes(text));
      row.classList.toggle("hidden", !show);
      if (show) { shown.add(group); shown.add(section); }
    });
    for (const { group, section } of tracks) {
      group.classList.toggle("hidden", !shown.has(group));
      if (section) section.classList.toggle("hidden", !shown.has(section));
    }
  }
  filter.addEventListener("input", refilter);
  kind.addEventListener("change", refilter);
  cluster.addEventListener("change", refilter);

  // Zoom and pan.
  function zoom(factor, at) {
    const center = at === undefined ? (view.from + view.to) / 2 : at;
    const width = Math.max(10, (view.to - view.from) * factor);
    const left = (center - view.from) / (view.to - view.from);
    view = { from: center - width * left, to: center + width * (1 - left) };
    draw();
  }
  zin.addEventListener("click", () => zoom(0.5));
  zout.addEventListener("click", () => zoom(2));
  zreset.addEventListener("click", () => { view = { ...whole }; draw(); });
  timeline.addEventListener("wheel", (e) => {
    const track = e.target.closest(".track");
    if (!track) return;
    e.preventDefault();
    const r = track.getBoundingClientRect();
    zoom(e.deltaY < 0 ? 0.8 : 1.25, view.from + ((e.clientX - r.left) / r.width) * (view.to - view.from));
  }, { passive: false });
  let drag = null;
  timeline.addEventListener("mousedown", (e) => {
    const track = e.target.closest(".track");
    if (track && !e.target.closest(".mark")) drag = { x: e.clientX, width: track.getBoundingClientRect().width, view: { ...view } };
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const dt = ((e.clientX - drag.x) / drag.width) * (drag.view.to - drag.view.from);
    view = { from: drag.view.from - dt, to: drag.view.to - dt };
    draw();
  });
  window.addEventListener("mouseup", () => { drag = null; });

  // Selecting a change.
  function show(v) { return v === undefined ? "" : JSON.stringify(v); }
  function select(id) {
    for (let li = 0; li < lanes.length; li++) {
      const i = lanes[li].marks.findIndex((m) => m.id === id);
      if (i < 0) continue;
      selected = id;
      const lane = lanes[li];
      const m = lane.marks[i];
      const now = version(li, i);
      detailTitle.className = "";
      detailTitle.textContent = `${fleet ? "cluster " + lane.cluster + ": " : ""}${lane.kind} ${lane.ns ? lane.ns + "/" : ""}${lane.name}: ${m.ty} at ${m.tt}, resourceVersion ${m.rv} (event ${m.id})`;
      diffTable.textContent = "";
      if (i === 0) {
        diffTable.append(el("caption", { class: "muted" }, "The object's first version in the range."));
      } else {
        const changes = diff(version(li, i - 1), now, "", []);
        diffTable.setAttribute("data-changes", String(changes.length));
        for (const c of changes) {
          const tr = el("tr", { class: c.kind, "data-path": c.path });
          tr.append(el("td", {}, c.kind), el("td", {}, c.path), el("td", {}, show(c.old)), el("td", {}, show(c.new)));
          diffTable.append(tr);
        }
      }
      objectPre.textContent = JSON.stringify(now, null, 2);
      draw();
      return;
    }
  }
  timeline.addEventListener("click", (e) => {
    const mark = e.target.closest(".mark[data-id]");
    if (mark) select(mark.getAttribute("data-id"));
  });

  // The objects as they were at a moment: each live object's last change at or before it,
  // as `kubecast replay --state-at` reconstructs them.
  function stateAt(at) {
    sliderTime.textContent = `at ${iso(at)}`;
    stateTable.textContent = "";
    const head = el("tr");
    for (const h of [...(fleet ? ["CLUSTER"] : []), "KIND", "NAMESPACE", "NAME", "PHASE", "NODE", "RESOURCEVERSION", "LAST CHANGE"]) head.append(el("th", {}, h));
    stateTable.append(head);
    let rows = 0;
    lanes.forEach((lane, li) => {
      let live = -1;
      lane.marks.forEach((m, i) => {
        if (m.t > at) return;
        if (live >= 0 && rvLess(m.rv, lane.marks[live].rv)) return;
        live = m.ty === "deleted" || m.ty === "inferred" ? -1 : i;
      });
      if (live < 0) return;
      const m = lane.marks[live];
      const obj = version(li, live) || {};
      const text = (v) => (typeof v === "string" ? v : null);
      const phase = text(get(get(obj, "status"), "phase")) || text(get(obj, "phase")) || "-";
      const node = text(get(get(obj, "spec"), "nodeName")) || text(get(obj, "nodeName")) || "-";
      const tr = el("tr", { class: "state-row", "data-uid": lane.uid, "data-cluster": lane.cluster });
      for (const c of [...(fleet ? [lane.cluster] : []), lane.kind, lane.ns, lane.name, phase, node, m.rv, m.tt]) tr.append(el("td", {}, c));
      stateTable.append(tr);
      rows++;
    });
    stateTable.setAttribute("data-rows", String(rows));
  }
  slider.addEventListener("input", () => stateAt(Number(slider.value)));

  // The fragment's settings, then the first drawing.
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const time = (v) => (/^\d+$/.test(v) ? Number(v) : Date.parse(v));
  if (params.has("filter")) filter.value = params.get("filter");
  if (params.has("kind")) kind.value = params.get("kind");
  if (params.has("cluster")) cluster.value = params.get("cluster");
  if (params.has("from") && params.has("to")) view = { from: time(params.get("from")), to: time(params.get("to")) };
  refilter();
  draw();
  if (params.has("select")) select(params.get("select"));
  const at = params.has("at") ? time(params.get("at")) : span[1];
  slider.value = String(at);
  stateAt(at);
  document.body.setAttribute("data-ready", "true");
})();

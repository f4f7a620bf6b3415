/* Shardwise web planner: four tabs over the HTTP API (no build step; charts by plotly.js from the
   plotly wheel, pipeline timelines drawn on a canvas). Every number shown comes from the API, which
   returns what the CLI prints with --format json. The URL carries the inputs of the open tab. */
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

const fmt = {
  num(x, d = 0) { return x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }); },
  sig(x, d = 4) { return x === null || x === undefined ? "–" : Number(Number(x).toPrecision(d)).toLocaleString("en-US", { maximumFractionDigits: 10 }); },
  pct(x, d = 1) { return x === null || x === undefined ? "–" : (100 * x).toFixed(d) + "%"; },
  usd(x, d = 0) { return x === null || x === undefined ? "–" : "$" + fmt.num(x, d); },
};

/* A mapping as YAML flow style ("{tp: 8, pp: 4}"): enough for job documents. */
function yamlValue(v) {
  if (v === null || v === undefined) return "null";
  if (Array.isArray(v)) return "[" + v.map(yamlValue).join(", ") + "]";
  if (typeof v === "object") return "{" + Object.entries(v).map(([k, x]) => `${k}: ${yamlValue(x)}`).join(", ") + "}";
  if (typeof v === "number" && Number.isInteger(v) && Math.abs(v) >= 1e9) return v.toExponential().replace("e+", ".0e+").replace(/(\.\d+)\.0e/, "$1e");
  if (typeof v === "string") return /^[A-Za-z0-9_.\-]+$/.test(v) && !/^(true|false|null|yes|no|on|off|[-+]?[0-9.e]+)$/i.test(v) ? v : JSON.stringify(v);
  return String(v);
}
function yamlDoc(obj, indent = "") {
  return Object.entries(obj).map(([k, v]) => {
    const flow = yamlValue(v);
    if (v && typeof v === "object" && !Array.isArray(v) && indent.length + k.length + flow.length > 72)
      return `${indent}${k}:\n` + yamlDoc(v, indent + "  ").replace(/\n$/, "");
    return `${indent}${k}: ${flow}`;
  }).join("\n") + "\n";
}

/* ----------------------------------------------------------------- API ---------------------------- */

class ApiError extends Error {
  constructor(detail, status) { super(detail); this.status = status; }
}

async function post(path, body) {
  let resp;
  try {
    resp = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  } catch (e) { throw new ApiError("cannot reach the server: " + e.message, 0); }
  const data = await resp.json().catch(() => ({ detail: `HTTP ${resp.status}` }));
  if (!resp.ok) throw new ApiError(typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail), resp.status);
  return data;
}

/* A search through the job queue: progress by server-sent events (polling if they fail), cancellable. */
function runJob(path, body, onProgress) {
  let jobId = null, source = null, timer = null, cancelled = false;
  const promise = new Promise((resolve, reject) => {
    const settle = (snap) => {
      if (source) source.close();
      if (timer) clearTimeout(timer);
      if (snap.state === "done") resolve(snap.result);
      else reject(new ApiError(snap.error || snap.state, snap.status || 500));
    };
    const update = (snap) => {
      if (["done", "failed", "cancelled"].includes(snap.state)) return settle(snap);
      onProgress(snap);
    };
    const poll = async () => {
      try {
        const r = await fetch(`/api/jobs/${jobId}`);
        update(await r.json());
      } catch (e) { return reject(new ApiError("lost the server: " + e.message, 0)); }
      if (!cancelled) timer = setTimeout(poll, 400);
    };
    const sep = path.includes("?") ? "&" : "?";
    post(path + sep + "background=true", body).then((snap) => {
      jobId = snap.id;
      onProgress(snap);
      if (cancelled) return fetch(`/api/jobs/${jobId}`, { method: "DELETE" });
      if (window.EventSource) {
        source = new EventSource(`/api/jobs/${jobId}/events`);
        source.onmessage = (ev) => update(JSON.parse(ev.data));
        source.onerror = () => { source.close(); source = null; if (!cancelled) poll(); };
      } else poll();
    }, reject);
  });
  const cancel = () => {
    cancelled = true;
    if (jobId) fetch(`/api/jobs/${jobId}`, { method: "DELETE" });
  };
  return { promise, cancel };
}

/* ----------------------------------------------------------------- page state --------------------- */

let CATALOG = null;
const TABS = ["train", "schedule", "serve", "rl"];
const FORMS = { train: "#form-train", schedule: "#form-schedule", serve: "#form-serve", rl: "#form-rl" };
let currentTab = "train";

function formValues(tab) {
  const out = {};
  for (const input of $$("input[name], select[name], textarea[name]", $(FORMS[tab]))) {
    if (input.type === "checkbox") out[input.name] = input.checked ? "1" : "0";
    else if (input.value !== "") out[input.name] = input.value;
  }
  if (tab === "schedule") out.schedules = selectedSchedules().join(",");
  return out;
}

function fillForm(tab, params) {
  for (const input of $$("input[name], select[name], textarea[name]", $(FORMS[tab]))) {
    if (!params.has(input.name)) continue;
    const v = params.get(input.name);
    if (input.type === "checkbox") input.checked = v === "1" || v === "true";
    else input.value = v;
  }
  if (tab === "schedule" && params.has("schedules")) {
    const pick = new Set(params.get("schedules").split(","));
    for (const box of $$("#sched-names input")) box.checked = pick.has(box.value);
  }
  if (tab === "train" && params.get("config")) $("#train-hf").open = true;
}

function writeURL(tab, run) {
  const params = new URLSearchParams({ tab, ...formValues(tab) });
  if (run) params.set("run", run);
  history.replaceState(null, "", "?" + params.toString());
}

function showTab(tab) {
  currentTab = tab;
  for (const t of TABS) {
    $(`#panel-${t}`).hidden = t !== tab;
    $(`#tab-${t}`).setAttribute("aria-selected", String(t === tab));
  }
  writeURL(tab, null);
  window.dispatchEvent(new Event("resize"));  // plotly charts drawn while hidden take the new width
}

function showError(tab, err) {
  const box = $(`#${tab === "schedule" ? "sched" : tab}-error`);
  const form = $(FORMS[tab]);
  for (const bad of $$(".invalid", form)) bad.classList.remove("invalid");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = err.message || String(err);
  // Mark the field the one-line message names ("parallel.tp: ...", "--seq-len: ...", "workload.rate: ...").
  const head = (err.message || "").split(":")[0].trim();
  const name = head.replace(/^--/, "").split(".").pop().replace(/-/g, "_").replace(/\[\d+\]$/, "");
  const aliases = { slo_ttft_ms: "slo_ttft_ms", ttft_ms: "slo_ttft_ms", tpot_ms: "slo_tpot_ms", input_len: "input_len", output_len: "output_len" };
  const input = $(`[name="${aliases[name] || name}"]`, form);
  if (input) input.classList.add("invalid");
}

function busy(tab, on, progress) {
  for (const b of $$("button", $(FORMS[tab]))) b.disabled = on;
  const box = progress ? $(progress) : null;
  if (box) box.hidden = !on;
}

function setProgress(sel, snap) {
  const box = $(sel);
  $(".bar span", box).style.width = `${Math.round(100 * (snap.fraction || 0))}%`;
  const where = snap.state === "queued" ? `queued (${snap.position} ahead)` : snap.message;
  $(".msg", box).textContent = `${where}${snap.elapsed_s ? ` — ${snap.elapsed_s.toFixed(1)} s` : ""}`;
}

/* ----------------------------------------------------------------- charts ------------------------- */

const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const BASE_LAYOUT = { margin: { l: 56, r: 12, t: 34, b: 44 }, font: { size: 12, family: "system-ui, DejaVu Sans, sans-serif" },
  paper_bgcolor: "#fff", plot_bgcolor: "#fff", legend: { orientation: "h", y: -0.22 }, hoverlabel: { font: { size: 12 } } };

function plot(target, traces, layout) {
  const node = typeof target === "string" ? $(target) : target;
  if (!window.Plotly) { node.textContent = "Charts need plotly.js (pip install 'shardwise[web]')."; return; }
  Plotly.react(node, traces, { ...BASE_LAYOUT, ...layout, title: { text: layout.title, font: { size: 13 }, x: 0.02 } }, PLOT_CONFIG);
}

const MEMORY_PARTS = [["params", "weights", "#2f6db5"], ["grads", "gradients", "#8fb8e8"], ["optimizer", "optimizer", "#d9762b"],
  ["activations", "activations", "#3c9a4a"], ["buffers", "buffers", "#b9a6d6"], ["fragmentation", "allocator fragmentation", "#e3c26b"],
  ["runtime", "CUDA context + NCCL", "#9aa3b2"]];

function memoryChart(target, e) {
  const parts = e.memory_per_rank_parts_gib && e.memory_per_rank_parts_gib.length
    ? e.memory_per_rank_parts_gib : [e.memory_gib];
  const ranks = parts.map((_, r) => `rank ${r}`);
  const traces = MEMORY_PARTS.map(([key, label, color]) => ({
    type: "bar", name: label, x: ranks, y: parts.map((p) => p[key]), marker: { color },
    hovertemplate: `%{x} ${label}: %{y:.2f} GiB<extra></extra>`,
  }));
  traces.push({ type: "scatter", mode: "lines", name: `${e.gpu} memory`, x: ranks, y: ranks.map(() => e.gpu_memory_gib),
    line: { color: "#b3261e", dash: "dash", width: 1.5 }, hovertemplate: `GPU memory: ${fmt.num(e.gpu_memory_gib, 0)} GiB<extra></extra>` });
  if (ranks.length === 1) traces[traces.length - 1] = { ...traces[traces.length - 1], mode: "markers", marker: { symbol: "line-ew-open", size: 60, color: "#b3261e" } };
  plot(target, traces, { title: "Memory per pipeline rank (GiB)", barmode: "stack", yaxis: { title: { text: "GiB" }, rangemode: "tozero" } });
}

const TIME_PARTS = [["compute", "compute", "#2f6db5"], ["tp_comm", "TP comm", "#d9762b"], ["pp_comm", "PP comm", "#f3bd8c"],
  ["dp_comm", "DP comm", "#c0392b"], ["cp_comm", "CP comm", "#e99a92"], ["ep_comm", "EP comm", "#8e44ad"],
  ["bubble", "bubble", "#9aa3b2"], ["optimizer", "optimizer", "#3c9a4a"], ["overhead", "overhead", "#5d6678"],
  ["act_offload", "act. offload", "#17a589"]];  // activation offload (exposed)

function timeChart(target, e) {
  const parts = TIME_PARTS.filter(([k]) => e.time_s[k] > 0);
  plot(target, [{
    type: "bar", orientation: "h", y: parts.map((p) => p[1]), x: parts.map(([k]) => e.time_s[k]),
    marker: { color: parts.map((p) => p[2]) }, text: parts.map(([k]) => (e.time_s[k] / e.step_time_s < 0.001 ? "<0.1%" : fmt.pct(e.time_s[k] / e.step_time_s))),
    textposition: "auto", hovertemplate: "%{y}: %{x:.4f} s<extra></extra>",
  }], { title: `Step time breakdown: ${fmt.sig(e.step_time_s, 4)} s`, xaxis: { title: { text: "seconds per step" } },
        yaxis: { autorange: "reversed" }, margin: { ...BASE_LAYOUT.margin, l: 80 }, showlegend: false });
}

/* ----------------------------------------------------------------- pipeline timelines (canvas) ---- */

const KIND_COLORS = { F: ["#2f6db5", "#8fb8e8"], I: ["#d9762b", "#f3bd8c"], B: ["#c0392b", "#e99a92"], W: ["#3c9a4a", "#9fd4a6"] };
const KIND_LABELS = { F: "F forward", I: "I input gradient", B: "B full backward (I+W)", W: "W weight gradient" };

function legend() {
  return el("div", { class: "legend" }, Object.entries(KIND_LABELS).map(([k, label]) =>
    el("span", {}, el("i", { style: `background:${KIND_COLORS[k][0]}` }), label)),
    el("span", {}, el("i", { style: "background:#cfd6e4" }), "lighter: a rank's later stage"));
}

function niceStep(span, n) {
  const raw = span / n, mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
}

function timeline(res, title, meta) {
  const canvas = el("canvas");
  const box = el("div", { class: "timeline", "data-schedule": res.schedule, "data-makespan": String(res.makespan),
    "data-bubble": String(res.bubble_fraction) }, el("h4", { text: title }),
    el("div", { class: "meta", text: meta + " · drag to zoom, double-click to reset" }), canvas);
  const rowH = res.pp > 16 ? 12 : 22, left = 52, top = 4, bottom = 22;
  const t0 = Math.min(...res.ranks.map((acts) => (acts.length ? acts[0].start : Infinity)).filter(Number.isFinite), 0);
  const full = [t0, t0 + Math.max(res.makespan, 1e-12)];
  let view = full.slice(), scale = 1, drag = null;
  const chunk = res.ranks.map((acts) => {  // light shade for a rank's later stages
    const stages = [...new Set(acts.map((a) => a.stage))].sort((a, b) => a - b);
    return new Map(stages.map((s, j) => [s, j % 2]));
  });
  const width = () => Math.max(canvas.clientWidth || box.clientWidth || 600, 200);
  const timeAt = (x) => view[0] + (x - left) / scale;
  const draw = () => {
    const W = width(), H = top + res.pp * rowH + bottom, dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr); canvas.style.height = H + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const span = view[1] - view[0];
    scale = (W - left - 10) / span;
    ctx.font = "11px system-ui, DejaVu Sans, sans-serif";
    ctx.textBaseline = "middle";
    for (let r = 0; r < res.pp; r++) {
      const y = top + r * rowH;
      ctx.fillStyle = "#5d6678"; ctx.textAlign = "right";
      ctx.fillText(`rank ${r}`, left - 6, y + rowH / 2);
      ctx.fillStyle = "#f3f5f8"; ctx.fillRect(left, y + 1, W - left - 10, rowH - 2);
      ctx.save(); ctx.beginPath(); ctx.rect(left, y, W - left - 10, rowH); ctx.clip();
      ctx.textAlign = "center";
      for (const a of res.ranks[r]) {
        if (a.end < view[0] || a.start > view[1]) continue;
        const x0 = left + (a.start - view[0]) * scale, w = Math.max(1, (a.end - a.start) * scale - 0.6);
        const light = chunk[r].get(a.stage);
        ctx.fillStyle = KIND_COLORS[a.kind][light];
        ctx.fillRect(x0, y + 2, w, rowH - 4);
        const label = String(a.microbatch);
        if (rowH >= 18 && w >= ctx.measureText(label).width + 4) {
          ctx.fillStyle = light ? "#1d2330" : "#fff";
          ctx.fillText(label, x0 + w / 2, y + rowH / 2);
        }
      }
      ctx.restore();
    }
    const axisY = top + res.pp * rowH + 4, step = niceStep(span, Math.max(2, Math.floor((W - left) / 90)));
    ctx.strokeStyle = "#9aa3b2"; ctx.fillStyle = "#5d6678"; ctx.textAlign = "center";
    ctx.beginPath(); ctx.moveTo(left, axisY); ctx.lineTo(W - 10, axisY); ctx.stroke();
    for (let t = Math.ceil(view[0] / step) * step; t <= view[1] + 1e-9 * span; t += step) {
      const x = left + (t - view[0]) * scale;
      ctx.beginPath(); ctx.moveTo(x, axisY); ctx.lineTo(x, axisY + 4); ctx.stroke();
      ctx.fillText(fmt.sig(t - t0, 3), x, axisY + 12);
    }
    if (drag && Math.abs(drag[1] - drag[0]) > 2) {
      ctx.fillStyle = "rgba(47,109,181,0.15)";
      ctx.fillRect(Math.min(...drag), top, Math.abs(drag[1] - drag[0]), res.pp * rowH);
    }
  };
  const tip = $("#tooltip");
  const localX = (ev) => ev.clientX - canvas.getBoundingClientRect().left;
  canvas.addEventListener("mousedown", (ev) => { drag = [localX(ev), localX(ev)]; });
  canvas.addEventListener("mouseup", () => {
    if (drag && Math.abs(drag[1] - drag[0]) > 5) view = [timeAt(Math.min(...drag)), timeAt(Math.max(...drag))].map((t) => Math.min(Math.max(t, full[0]), full[1]));
    drag = null; draw();
  });
  canvas.addEventListener("dblclick", () => { view = full.slice(); draw(); });
  canvas.addEventListener("mousemove", (ev) => {
    if (drag) { drag[1] = localX(ev); draw(); return; }
    const rect = canvas.getBoundingClientRect();
    const r = Math.floor((ev.clientY - rect.top - top) / rowH), t = timeAt(ev.clientX - rect.left);
    const a = r >= 0 && r < res.pp ? res.ranks[r].find((x) => x.start <= t && t <= x.end) : null;
    if (!a) { tip.hidden = true; return; }
    tip.hidden = false;
    tip.textContent = `rank ${r}: ${a.action} (stage ${a.stage}, micro-batch ${a.microbatch}) ${fmt.sig(a.start - t0, 4)} → ${fmt.sig(a.end - t0, 4)}`;
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; if (drag) { drag = null; draw(); } });
  new ResizeObserver(draw).observe(box);
  requestAnimationFrame(draw);
  return box;
}

function timelineMeta(res) {
  return `makespan ${fmt.sig(res.makespan, 4)} · bubble ${fmt.pct(res.bubble_fraction)} of makespan (ratio ${fmt.sig(res.bubble_ratio, 3)}) · ` +
    `stage bubble ${fmt.pct(res.stage_bubble_ratio)} · peak activation ${fmt.sig(Math.max(...res.peak_activation_rank_microbatches), 3)} micro-batches (rank slice)`;
}

/* ----------------------------------------------------------------- Training tab -------------------- */

function planLabel(p, recipe = p.fp8_recipe, dispatcher = p.moe_dispatcher) {  // as train/plan_report.py plan_label
  const parts = [`tp${p.tp}`, `pp${p.pp}`];
  if (p.vpp > 1) parts.push(`v${p.vpp}`);
  parts.push(`dp${p.dp}`);
  if (p.cp > 1) parts.push(`cp${p.cp}` + (p.cp_comm && p.cp_comm !== "p2p" ? `/${p.cp_comm}` : "") + (p.ulysses ? ` u${p.ulysses}` : ""));
  if (p.ep > 1) parts.push(`ep${p.ep}`);
  if (p.etp !== undefined && p.etp !== null && p.etp !== p.tp) parts.push(`etp${p.etp}`);
  if (recipe) parts.push(recipe);
  if (dispatcher && dispatcher !== "alltoall") parts.push(dispatcher);
  parts.push(`z${p.zero}`, `mb${p.micro_batch}`, p.schedule);
  if (p.recompute !== "none") parts.push(`rc=${p.recompute}`);
  if (p.sequence_parallel && p.tp > 1) parts.push("sp");
  if (p.tp_overlap && !["none", "auto"].includes(p.tp_overlap) && p.tp > 1) parts.push(`tpo=${p.tp_overlap}`);
  if (p.microbatch_group) parts.push(`N${p.microbatch_group}`);
  if (p.offload && p.offload !== "none") parts.push(`offload=${p.offload}` + (p.offload_device === "nvme" ? "@nvme" : ""));
  if (p.offload_activations) parts.push(`act-offload${p.offload_activations_policy === "selective" ? "-selective" : ""}=${p.offload_activations}`);
  return parts.join(" ");
}

function numberOr(v, fallback) { const x = Number(v); return v === "" || v === undefined || !Number.isFinite(x) ? fallback : x; }

function trainModel() {
  const text = $("#train-config").value.trim();
  if (!text) return $("#train-model").value;
  try { return JSON.parse(text); } catch (e) { throw new ApiError(`model: the pasted config.json is not valid JSON (${e.message})`, 422); }
}

function trainBase() {
  const v = formValues("train");
  const training = { seq_len: numberOr(v.seq_len, v.seq_len), global_batch: numberOr(v.global_batch, v.global_batch), precision: v.precision };
  if (v.tokens) training.tokens = numberOr(v.tokens, v.tokens);
  return { v, model: trainModel(), cluster: { gpu: v.gpu, gpus: numberOr(v.gpus, v.gpus) }, training };
}

function trainJob() {
  const { v, model, cluster, training } = trainBase();
  const parallel = {
    tp: numberOr(v.tp, v.tp), pp: numberOr(v.pp, v.pp), vpp: numberOr(v.vpp, v.vpp), cp: numberOr(v.cp, v.cp),
    ep: numberOr(v.ep, v.ep), dp: !v.dp || v.dp === "auto" ? "auto" : numberOr(v.dp, v.dp), zero: Number(v.zero),
    sequence_parallel: v.sp === "1", recompute: v.recompute, micro_batch: numberOr(v.micro_batch, v.micro_batch), schedule: v.schedule,
    tp_overlap: v.tp_overlap || "auto",
  };
  if (v.offload && v.offload !== "none") Object.assign(parallel, { offload: v.offload, offload_device: v.offload_device || "cpu" });
  return { model, cluster, training, parallel };
}

function card(k, v, sub, cls, key, raw) {  // data-key/data-value: the exact number behind the rounded text
  return el("div", { class: "card", "data-key": key, "data-value": raw === undefined || raw === null ? null : String(raw) },
    el("div", { class: "k", text: k }), el("div", { class: "v " + (cls || ""), text: v }), sub ? el("div", { class: "s", text: sub }) : null);
}

function estimateCards(e) {
  return [
    card("step time", `${fmt.sig(e.step_time_s, 4)} s`, `${e.microbatches} micro-batches`, "", "step_time_s", e.step_time_s),
    card("tokens/s per GPU", fmt.num(e.tokens_per_s_per_gpu), `${fmt.sig(e.model_tflops_per_gpu, 4)} model TFLOP/s`, "", "tokens_per_s_per_gpu", e.tokens_per_s_per_gpu),
    card("MFU (causal)", fmt.pct(e.mfu_causal), `MFU (non-causal) ${fmt.pct(e.mfu)} · HFU ${fmt.pct(e.hfu)}`, "", "mfu_causal", e.mfu_causal),
    card("peak memory", `${fmt.num(e.peak_memory_gib, 1)} GiB`, (e.fits ? `fits in ${fmt.num(e.gpu_memory_gib)} GiB (rank ${e.peak_memory_rank})` : `does NOT fit in ${fmt.num(e.gpu_memory_gib)} GiB`)
      + (e.peak_reserved_gib !== undefined ? `; allocated ${fmt.num(e.peak_allocated_gib, 1)}, reserved ${fmt.num(e.peak_reserved_gib, 1)} GiB` : ""), e.fits ? "good" : "bad", "peak_memory_gib", e.peak_memory_gib),
    e.host_memory ? card("offloaded per node", `${fmt.num(e.host_memory.dram_used_gib)} GiB`, hostLine(e), e.fits ? "good" : ((e.misfit || "").startsWith("GPU") ? "" : "bad"), "host_dram_used_gib", e.host_memory.dram_used_gib) : null,
    card("bubble", fmt.pct(e.bubble_fraction), "idle share of the makespan", "", "bubble_fraction", e.bubble_fraction),
    e.days_to_train !== null && e.days_to_train !== undefined ? card("days to train", fmt.num(e.days_to_train, 1), e.cost_usd ? fmt.usd(e.cost_usd) : null, "", "days_to_train", e.days_to_train) : null,
    e.goodput ? card("effective training time", fmt.pct(e.goodput.ettr), goodputLine(e.goodput), "", "ettr", e.goodput.ettr) : null,
  ];
}

function hostLine(e) {  // offload below HBM: host DRAM and NVMe per node (docs/offload.md)
  const h = e.host_memory;
  const dram = h.dram_available_gib === null ? "host DRAM not checked (set cluster.host.dram_gib)" : `of ${fmt.num(h.dram_available_gib)} GiB host DRAM`;
  const nvme = h.nvme_available_tb !== null ? ` · NVMe ${fmt.num(h.nvme_used_tb, 2)} of ${fmt.num(h.nvme_available_tb, 2)} TB` : "";
  return `${dram} (${h.gpus_per_node} GPUs to ${h.device})${nvme}` + (e.misfit && !e.misfit.startsWith("GPU") ? ` · ${e.misfit}` : "");
}

function goodputLine(g) {  // failures, checkpoints and restarts (docs/goodput.md)
  const ck = g.checkpoint;
  const days = g.days_to_train !== null ? `${fmt.num(g.days_to_train, 1)} days with failures` + (g.cost_usd ? ` · ${fmt.usd(g.cost_usd)}` : "") + " · " : "";
  return `${days}MTTF ${fmt.sig(g.mttf_h, 3)} h · checkpoint every ${fmt.num(ck.interval_steps)} steps (${ck.mode}, ${fmt.sig(ck.blocking_s, 3)} s) · ${g.spares.nodes} spare nodes`;
}

async function planTimeline(host, e) {
  host.replaceChildren();
  const p = e.plan;
  if (p.pp <= 1) { host.append(el("p", { class: "hint", text: "No pipeline (pp = 1): every rank runs all layers." })); return; }
  const body = { schedule: p.schedule, pp: p.pp, vpp: p.vpp, microbatches: e.microbatches,
    f: e.stage_times_s.F, i: e.stage_times_s.I, w: e.stage_times_s.W };
  host.append(el("h3", { text: "Pipeline timeline of this plan" }));
  try {
    const res = await post("/api/schedule/simulate", body);
    host.append(legend(), timeline(res, `${res.schedule}: pp=${res.pp}, ${res.num_stages} stages, ${res.microbatches} micro-batches`,
      `${timelineMeta(res)} · times in seconds from the plan's per-stage F/I/W; point-to-point transfers not drawn`));
  } catch (err) { host.append(el("p", { class: "hint", text: `timeline not drawn: ${err.message}` })); }
}

async function runEstimate() {
  showError("train", null);
  let job;
  try { job = trainJob(); } catch (err) { return showError("train", err); }
  writeURL("train", "estimate");
  busy("train", true);
  try {
    const e = await post("/api/train/estimate", job);
    $("#train-empty").hidden = true; $("#train-plan-out").hidden = true; $("#train-estimate-out").hidden = false;
    $("#train-est-title").textContent = `${e.model} on ${e.num_gpus} × ${e.gpu}: ${planLabel(e.plan, e.fp8_recipe, e.moe_dispatcher)}`;
    $("#train-cards").replaceChildren(...estimateCards(e).filter(Boolean));
    memoryChart("#chart-memory", e);
    timeChart("#chart-time", e);
    $("#train-notes").replaceChildren(el("li", { text: `bubble measured on the ${e.bubble_definition}` }), ...e.notes.map((n) => el("li", { text: n })));
    await planTimeline($("#train-est-timeline"), e);
  } catch (err) { showError("train", err); } finally { busy("train", false); }
}

let planRun = null;

async function runPlan() {
  showError("train", null);
  let base;
  try { base = trainBase(); } catch (err) { return showError("train", err); }
  const v = base.v;
  const gpus = [v.gpu, ...(v.compare || "").split(",").map((s) => s.trim()).filter(Boolean)];
  const body = { model: base.model, gpu: gpus, gpus: base.cluster.gpus === "" ? null : base.cluster.gpus, seq_len: base.training.seq_len,
    global_batch: base.training.global_batch, precision: v.precision, objective: v.objective, top: numberOr(v.top, 5) };
  if (base.training.tokens !== undefined) body.tokens = base.training.tokens;
  if (v.max_memory_gib) body.max_memory_gib = numberOr(v.max_memory_gib, v.max_memory_gib);
  writeURL("train", "plan");
  busy("train", true, "#train-progress");
  setProgress("#train-progress", { state: "queued", position: 0, fraction: 0 });
  planRun = runJob("/api/train/plan", body, (snap) => setProgress("#train-progress", snap));
  try {
    renderPlan(await planRun.promise, body);
  } catch (err) { showError("train", err); } finally { busy("train", false, "#train-progress"); planRun = null; }
}

function renderPlan(out, body) {
  $("#train-empty").hidden = true; $("#train-estimate-out").hidden = true; $("#train-plan-out").hidden = false;
  const multi = out.searches.length > 1;
  const s = out.searches;
  fitPanel(out);
  $("#train-plan-summary").textContent = s.map((r) => `${r.gpu} × ${r.num_gpus}: ${fmt.num(r.considered)} plans, ${fmt.num(r.feasible_after_screen)} fit, ${r.exact_evaluations} estimated exactly in ${fmt.sig(r.seconds.total, 3)} s`).join(" · ") + ` · objective ${out.objective}`;
  const withDays = out.top.some((e) => e.days_to_train !== null && e.days_to_train !== undefined);
  const head = ["#", ...(multi ? ["GPU"] : []), "plan", "step s", "tokens/s/GPU", "MFU (causal)", "peak GiB", "bubble s", ...(withDays ? ["days", "$"] : []), "runs on"];
  const table = $("#train-top-plans");
  table.replaceChildren(el("thead", {}, el("tr", {}, head.map((h) => el("th", { class: h === "plan" || h === "GPU" ? "l" : "", text: h })))));
  const tbody = el("tbody");
  out.top.forEach((e, k) => {
    const tr = el("tr", { "data-rank": k + 1, "data-step": String(e.step_time_s), onclick: () => selectPlan(e, k + 1, tr) },
      el("td", { text: k + 1 }), multi ? el("td", { class: "l", text: e.gpu }) : null,
      el("td", { class: "l plan", text: planLabel(e.plan, e.fp8_recipe, e.moe_dispatcher) }), el("td", { text: fmt.sig(e.step_time_s, 4) }),
      el("td", { text: fmt.num(e.tokens_per_s_per_gpu) }), el("td", { text: fmt.pct(e.mfu_causal) }),
      el("td", { text: fmt.num(e.peak_memory_gib, 1) }), el("td", { text: fmt.sig(e.time_s.bubble, 3) }),
      withDays ? el("td", { text: fmt.num(e.days_to_train, 1) }) : null, withDays ? el("td", { text: fmt.usd(e.cost_usd) }) : null,
      el("td", { class: "l", text: (e.runnable_on || []).join(", ") || "none as is" }));
    tbody.append(tr);
  });
  table.append(tbody);
  frontChart(out, multi);
  const reasons = [...new Set(s.flatMap((r) => Object.keys(r.rejected)))];
  const rej = $("#train-rejects");
  rej.replaceChildren(el("thead", {}, el("tr", {}, el("th", { class: "l", text: "reason" }), s.map((r) => el("th", { text: r.gpu })))),
    el("tbody", {}, reasons.map((why) => el("tr", {}, el("td", { class: "l", text: why }), s.map((r) => el("td", { text: fmt.num(r.rejected[why] || 0) })))),
      el("tr", {}, el("td", { class: "l", text: "considered" }), s.map((r) => el("td", { text: fmt.num(r.considered) })))));
  $("#train-plan-notes").replaceChildren(...s.flatMap((r) => r.notes.map((n) => el("li", { text: `${r.gpu}: ${n}` }))));
  $("#train-selected").hidden = true;
  if (out.top.length) selectPlan(out.top[0], 1, $("#train-top-plans tbody tr"));
}

/* "Will it fit?": the smallest cluster of each GPU type (no GPU count given), and when nothing fitted, the
   closest plans and the ranked levers (train/fit_report.py prints the same in the terminal). */
function fitPanel(out) {
  const box = $("#train-fit");
  const parts = [];
  const sized = out.smallest_clusters;
  if (sized) {
    for (const r of sized.per_gpu) {
      const money = r.usd_per_million_tokens === null ? "" : ` · $${fmt.sig(r.usd_per_million_tokens, 3)}/M tokens`;
      parts.push(el("h3", { text: r.gpus === null ? `No count of ${r.gpu} fits` :
        `Smallest count that ${sized.deadline_days ? "trains in " + sized.deadline_days + " days" : "fits"}: ${r.gpus} × ${r.gpu}` +
        (sized.cheapest === r.gpu && sized.per_gpu.length > 1 ? " (cheapest)" : "") + money }));
      parts.push(el("ul", { class: "notes" }, r.counts.map((c) => el("li", { text: `${c.from_gpus && c.from_gpus !== c.gpus ? c.from_gpus + "–" : ""}${c.gpus} GPUs: ${c.reason}` }))));
    }
  }
  const a = out.what_to_change;
  if (a) {
    parts.push(el("h3", { text: `No plan fits ${a.gpus} × ${a.gpu} (${fmt.num(a.usable_gib, 1)} GiB usable)` +
      (a.searched_with_offload ? ` without offloading: the plans below offload ${a.searched_with_offload}` + (a.searched_with_offload_device === "nvme" ? " to NVMe" : "") : "") +
      (a.searched_with_offload_activations ? ` without offloading: the plans below offload ${fmt.num(100 * a.searched_with_offload_activations, 0)}% of their activations to host memory` : "") }));
    parts.push(el("table", { class: "data", id: "train-closest" },
      el("thead", {}, el("tr", {}, ["closest plan", "peak GiB", "misses by GiB", "where the memory goes (GiB)"].map((h) => el("th", { text: h })))),
      el("tbody", {}, a.closest.map((c) => el("tr", {}, el("td", { class: "l", text: c.plan }), el("td", { text: fmt.num(c.peak_memory_gib, 1) }),
        el("td", { text: fmt.num(c.misses_by_gib, 1) }), el("td", { class: "l", text: c.what }))))));
    parts.push(el("table", { class: "data", id: "train-levers" },
      el("thead", {}, el("tr", {}, ["#", "what would make it fit", "fastest plan with it", "tokens/s/GPU", "$/M tokens", "note"].map((h) => el("th", { text: h })))),
      el("tbody", {}, a.levers.map((lv, k) => el("tr", {}, el("td", { text: lv.fits ? k + 1 : "–" }), el("td", { class: "l", text: lv.change }),
        el("td", { class: "l", text: lv.fits ? `${lv.gpu} × ${lv.gpus}: ${lv.plan}` : "does not fit" }),
        el("td", { text: fmt.num(lv.tokens_per_s_per_gpu) }), el("td", { text: lv.usd_per_million_tokens === null ? "–" : fmt.sig(lv.usd_per_million_tokens, 3) }),
        el("td", { class: "l", text: lv.note }))))));
  }
  box.replaceChildren(...parts);
  box.hidden = !parts.length;
}

function frontChart(out, multi) {
  const pts = out.pareto_front;
  const xKey = multi ? "usd_per_million_tokens" : "peak_memory_gib";
  const traces = [];
  for (const exact of [false, true]) {
    const group = pts.filter((p) => p.exact === exact).sort((a, b) => a[xKey] - b[xKey]);
    traces.push({ type: "scatter", mode: "markers", name: exact ? "front (exact estimate)" : "front (screen)",
      x: group.map((p) => p[xKey]), y: group.map((p) => p.tokens_per_s_per_gpu), customdata: group.map((p) => p),
      text: group.map((p) => `${multi ? p.gpu + " " : ""}${planLabel(p.plan)}`),
      marker: { size: 8, color: exact ? "#2f6db5" : "#8fb8e8", line: { width: 1, color: "#2f6db5" } },
      hovertemplate: "%{text}<br>%{y:,.0f} tokens/s/GPU<br>%{x:.2f} " + (multi ? "$/M tokens" : "GiB") + "<extra></extra>" });
  }
  const sorted = [...pts].sort((a, b) => a[xKey] - b[xKey]);
  traces.unshift({ type: "scatter", mode: "lines", name: "Pareto front", x: sorted.map((p) => p[xKey]), y: sorted.map((p) => p.tokens_per_s_per_gpu),
    line: { color: "#cfd6e4", shape: multi ? "linear" : "hv" }, hoverinfo: "skip" });
  const top = out.top.map((e) => ({ e, x: multi ? usdPerMTokens(e) : e.peak_memory_gib }));
  traces.push({ type: "scatter", mode: "markers+text", name: "top plans", x: top.map((t) => t.x), y: top.map((t) => t.e.tokens_per_s_per_gpu),
    text: top.map((_, k) => (k ? "" : "#1")), hovertext: top.map((t, k) => `#${k + 1} ${planLabel(t.e.plan, t.e.fp8_recipe, t.e.moe_dispatcher)}`), textposition: "top left", marker: { symbol: "star", size: 14, color: "#1d2330" },
    hovertemplate: "%{hovertext}<extra></extra>" });
  plot("#chart-front", traces, { title: multi ? "Pareto front: throughput vs $ per million tokens" : "Pareto front: throughput vs peak memory",
    legend: { orientation: "h", y: -0.3 }, margin: { ...BASE_LAYOUT.margin, b: 90 },
    xaxis: { title: { text: multi ? "$ per million tokens" : "peak memory per GPU (GiB)" } }, yaxis: { title: { text: "tokens/s per GPU" } } });
  const node = $("#chart-front");
  if (node.removeAllListeners) node.removeAllListeners("plotly_click");
  if (node.on) node.on("plotly_click", (ev) => {
    const p = ev.points[0];
    if (p.customdata) estimateFrontPoint(p.customdata);
    else if (p.data.name === "top plans") selectPlan(out.top[p.pointIndex], p.pointIndex + 1, $$("#train-top-plans tbody tr")[p.pointIndex]);
  });
}

function usdPerMTokens(e) {
  const gpu = CATALOG.gpus.find((g) => g.name === e.gpu);
  if (!gpu || gpu.price_usd_per_hour === null) return null;
  return gpu.price_usd_per_hour / 3600 / e.tokens_per_s_per_gpu * 1e6;
}

function chosenTraining(training, recipe, dispatcher) {  // the training section with a search's recipe and dispatcher
  const out = recipe ? { ...training, fp8_recipe: recipe } : { ...training };
  if (dispatcher) out.moe = { ...(training.moe || {}), dispatcher };
  return out;
}

async function estimateFrontPoint(p) {
  const { model, cluster, training } = trainBase();
  const { fp8_recipe, moe_dispatcher, ...plan } = p.plan;  // what a search chooses beyond the plan: training fields
  const job = { model, cluster: { ...cluster, gpu: p.gpu || cluster.gpu }, training: chosenTraining(training, fp8_recipe, moe_dispatcher),
    parallel: { ...plan, dp: "auto" } };
  try { selectPlan(await post("/api/train/estimate", job), "front", null); } catch (err) { showError("train", err); }
}

async function selectPlan(e, rank, row) {
  for (const tr of $$("#train-top-plans tbody tr")) tr.classList.toggle("selected", tr === row);
  const box = $("#train-selected");
  box.hidden = false;
  const { model, training } = trainBase();
  const parallel = Object.fromEntries(Object.entries(e.plan).filter(([k]) => !["flash_attention", "overlap_grad_reduce"].includes(k) || e.plan[k] === false));
  const job = e.job || { model, cluster: { gpu: e.gpu, gpus: e.num_gpus }, training: chosenTraining(training, e.fp8_recipe, e.moe_dispatcher), parallel };
  const yaml = yamlDoc(job);
  const commands = ["shardwise train estimate job.yaml",
    ...(CATALOG.export_targets || []).filter((t) => t.kind === "training").map((t) => `shardwise train export job.yaml --to ${t.name} --format script`)].join("\n");
  const exportBox = el("pre", { class: "code", text: "…" });
  const timelineBox = el("div");
  box.replaceChildren(
    el("h3", { text: `${rank === "front" ? "Front point" : "Plan #" + rank}: ${e.gpu} × ${e.num_gpus}, ${planLabel(e.plan, e.fp8_recipe, e.moe_dispatcher)}` }),
    el("div", { class: "cards" }, estimateCards(e).filter(Boolean)),
    timelineBox,
    el("div", { class: "charts two" },
      el("div", {}, el("h3", { text: "job.yaml" }), el("pre", { class: "code", text: yaml }),
        el("button", { type: "button", onclick: () => loadPlanIntoForm(e) }, "Open in Estimate")),
      el("div", {}, el("h3", { text: "Commands" }), el("pre", { class: "code", text: commands }), el("h3", { text: "Export" }), exportBox)));
  const engines = (CATALOG.export_targets || []).filter((t) => t.kind === "training").map((t) => t.name);
  const showExport = (to) => post("/api/train/export", { job, to, format: "args" }).then(
    (x) => { exportBox.textContent = `# ${x.engine} ${x.version}\n${x.text}${x.notes.map((n) => "\n# note: " + n).join("")}`; },
    (err) => { exportBox.textContent = `${to}: ${err.message}`; });
  exportBox.before(el("div", { class: "actions" }, engines.map((to) => el("button", { type: "button", class: "ghost", "data-engine": to, onclick: () => showExport(to) }, to))));
  showExport(engines.find((x) => (e.runnable_on || []).includes(x)) || engines[0]);
  await planTimeline(timelineBox, e);
}

function loadPlanIntoForm(e) {
  const p = e.plan, set = (id, v) => { $(id).value = v; };
  set("#train-gpu", e.gpu); set("#train-gpus", e.num_gpus);
  set("#train-tp", p.tp); set("#train-pp", p.pp); set("#train-vpp", p.vpp); set("#train-cp", p.cp); set("#train-ep", p.ep);
  set("#train-dp", "auto"); set("#train-zero", p.zero); set("#train-mb", p.micro_batch); set("#train-recompute", p.recompute);
  set("#train-schedule", p.schedule); $("#train-sp").checked = !!p.sequence_parallel;
  set("#train-tp-overlap", p.tp_overlap || "auto");
  set("#train-offload", p.offload || "none"); set("#train-offload-device", p.offload_device || "cpu");
  $("#train-parallel-box").open = true;
  runEstimate();
}

/* ----------------------------------------------------------------- Schedules tab ------------------- */

function selectedSchedules() { return $$("#sched-names input:checked").map((b) => b.value); }

async function runSchedules() {
  showError("schedule", null);
  const v = formValues("schedule");
  const names = selectedSchedules();
  if (!names.length) return showError("schedule", new ApiError("schedules: pick at least one schedule", 422));
  const body = { pp: numberOr(v.pp, v.pp), microbatches: numberOr(v.microbatches, v.microbatches), vpp: numberOr(v.vpp, v.vpp),
    f: v.f, i: v.i, w: v.w, comm: numberOr(v.comm, v.comm), schedules: names.join(",") };
  writeURL("schedule", "simulate");
  busy("schedule", true);
  try {
    const rows = await post("/api/schedule/compare", body);
    const table = $("#sched-table");
    table.replaceChildren(el("thead", {}, el("tr", {}, ["schedule", "vpp", "makespan", "stage span", "bubble fraction", "bubble ratio", "stage bubble", "peak act. (rank mb)"]
      .map((h, k) => el("th", { class: k ? "" : "l", text: h })))),
      el("tbody", {}, rows.map((r) => r.error
        ? el("tr", {}, el("td", { class: "l", text: r.schedule }), el("td", { text: r.vpp }), el("td", { class: "l", colspan: 6, text: "n/a: " + r.error }))
        : el("tr", { "data-schedule": r.schedule }, el("td", { class: "l", text: r.schedule }), el("td", { text: r.vpp }), el("td", { text: fmt.sig(r.makespan, 6) }),
          el("td", { text: fmt.sig(r.stage_span, 6) }), el("td", { text: fmt.pct(r.bubble_fraction) }), el("td", { text: fmt.sig(r.bubble_ratio, 4) }),
          el("td", { text: fmt.pct(r.stage_bubble_ratio) }), el("td", { text: fmt.sig(r.peak_activation_rank_microbatches, 3) })))));
    const ok = rows.filter((r) => !r.error);
    const sims = await Promise.all(ok.map((r) => {
      // simulate takes compare's unit (a rank slice's time, split over its stages), so the form's values go as they are
      return post("/api/schedule/simulate", { schedule: r.schedule, pp: body.pp, microbatches: body.microbatches, vpp: r.vpp,
        f: body.f, i: body.i, w: body.w, comm: body.comm, ...(r.placement ? { placement: r.placement } : {}) });
    }));
    $("#sched-empty").hidden = true; $("#sched-out").hidden = false;
    $("#sched-legend").replaceWith(Object.assign(legend(), { id: "sched-legend" }));
    $("#sched-timelines").replaceChildren(...sims.map((res) => timeline(res, `${res.schedule} (vpp ${res.vpp})`, timelineMeta(res))));
  } catch (err) { showError("schedule", err); } finally { busy("schedule", false); }
}

/* ----------------------------------------------------------------- Serving tab --------------------- */

function lengthSpec(text, field) {
  const t = String(text || "").trim().toLowerCase();
  if (!t || t === "sharegpt") return { dist: "sharegpt" };
  const range = t.match(/^(\d+)\s*-\s*(\d+)$/);
  if (range) return { dist: "uniform", min: Number(range[1]), max: Number(range[2]) };
  if (/^\d+$/.test(t)) return Number(t);
  throw new ApiError(`workload.${field}: give sharegpt, a number of tokens, or min-max; got ${JSON.stringify(text)}`, 422);
}

let traceText = null;

function serveInputs() {
  const v = formValues("serve");
  const rate = numberOr(v.rate, v.rate);
  const workload = traceText !== null ? { arrival: "trace" }
    : { arrival: v.arrival, rate, num_requests: 600, input_len: lengthSpec(v.input_len, "input_len"), output_len: lengthSpec(v.output_len, "output_len"), seed: 0 };
  const slo = {};
  if (v.slo_ttft_ms) slo.ttft_ms = numberOr(v.slo_ttft_ms, v.slo_ttft_ms);
  if (v.slo_tpot_ms) slo.tpot_ms = numberOr(v.slo_tpot_ms, v.slo_tpot_ms);
  if (v.attainment) slo.attainment = numberOr(v.attainment, v.attainment);
  return { v, rate, workload, slo };
}

let serveRun = null, lastServe = null;

async function runServePlan() {
  showError("serve", null);
  let inp;
  try { inp = serveInputs(); } catch (err) { return showError("serve", err); }
  const { v, rate, workload, slo } = inp;
  const body = { model: v.model, precision: v.precision, rate, gpu_mix: v.gpu_mix, workload,
    slo_ttft_ms: slo.ttft_ms, slo_tpot_ms: slo.tpot_ms, attainment: slo.attainment,
    disaggregation: v.disagg === "1", mix: v.mix === "1" };
  if (traceText !== null) body.trace_csv = traceText;
  writeURL("serve", traceText === null ? "plan" : null);
  busy("serve", true, "#serve-progress");
  setProgress("#serve-progress", { state: "queued", position: 0, fraction: 0 });
  serveRun = runJob("/api/serve/plan?plot=true", body, (snap) => setProgress("#serve-progress", snap));
  try {
    const out = await serveRun.promise;
    lastServe = { out, inp };
    renderServePlan(out);
    const pick = out.chosen || null;
    if (pick) await simulateDeployment(pick, 0);
  } catch (err) { showError("serve", err); } finally { busy("serve", false, "#serve-progress"); serveRun = null; }
}

function candidateRow(c, tag, k) {
  const p = c.predicted || {};
  const tr = el("tr", { "data-index": k, onclick: () => simulateDeployment(c, k) },
    el("td", { class: "l", text: tag }), el("td", { class: "l plan", text: c.description }), el("td", { text: fmt.num(c.usd_per_hour, 2) }),
    el("td", { text: p.ttft_ms ? fmt.num(p.ttft_ms.p90) : "–" }), el("td", { text: p.tpot_ms ? fmt.num(p.tpot_ms.p90, 1) : "–" }),
    el("td", { text: p.slo_attainment !== undefined ? fmt.pct(p.slo_attainment) : "–" }),
    el("td", { text: p.cost_usd_per_mtok_output !== undefined ? fmt.num(p.cost_usd_per_mtok_output, 3) : "–" }),
    el("td", { class: "l", text: c.reason || "" }));
  return tr;
}

function renderServePlan(out) {
  $("#serve-empty").hidden = true; $("#serve-out").hidden = false;
  const slo = Object.entries(out.slo).filter(([k, x]) => x !== null && k !== "attainment").map(([k, x]) => `${k.replace("_ms", "").toUpperCase()} ≤ ${x} ms`).join(", ");
  $("#serve-title").textContent = `${out.model} (${out.precision}) at ${fmt.sig(out.rate, 4)} req/s — ${slo} for ${fmt.pct(out.slo.attainment, 0)} of requests`;
  const c = out.chosen;
  const p = c ? c.predicted || {} : {};
  $("#serve-cards").replaceChildren(...(c ? [
    card("cheapest deployment", fmt.usd(c.usd_per_hour, 2) + "/h", Object.entries(c.gpus).map(([g, n]) => `${n}× ${g}`).join(", "), "good"),
    card("p90 TTFT", p.ttft_ms ? `${fmt.num(p.ttft_ms.p90)} ms` : "–", `median ${p.ttft_ms ? fmt.num(p.ttft_ms.median) : "–"} ms`),
    card("p90 TPOT", p.tpot_ms ? `${fmt.num(p.tpot_ms.p90, 1)} ms` : "–", `median ${p.tpot_ms ? fmt.num(p.tpot_ms.median, 1) : "–"} ms`),
    card("SLO attainment", fmt.pct(p.slo_attainment), `goodput ${fmt.sig(p.goodput, 3)} req/s`),
    card("$ per M output tokens", p.cost_usd_per_mtok_output !== undefined ? "$" + fmt.num(p.cost_usd_per_mtok_output, 3) : "–", `input $${fmt.num(p.cost_usd_per_mtok_input, 3)}`),
  ] : [card("no feasible deployment", "none", "the closest candidates are listed", "bad")]));
  const head = ["", "deployment", "$/hour", "p90 TTFT ms", "p90 TPOT ms", "attainment", "$/M out tok", ""];
  const rows = c ? [candidateRow(c, "chosen", 0), ...out.runners_up.map((r, k) => candidateRow(r, "", k + 1))]
    : out.closest.map((r, k) => candidateRow(r, "closest", k));
  $("#serve-table").replaceChildren(el("thead", {}, el("tr", {}, head.map((h, k) => el("th", { class: k < 2 || k === 7 ? "l" : "", text: h })))), el("tbody", {}, rows));
  if (rows.length) rows[0].classList.add("selected");
  $("#serve-yaml").textContent = c ? yamlDoc({ deployment: c.deployment }) : "(none meets the SLOs)";
  $("#serve-notes").replaceChildren(...[out.mix ? `GPU mix: ${out.mix}` : null,
    `searched ${out.instance_capacities.length} instance configs with ${out.search.simulations} simulations in ${fmt.sig(out.search.seconds, 3)} s`]
    .filter(Boolean).map((t) => el("li", { text: t })));
  costChart(out);
}

function costChart(out) {
  const data = out.plot;
  if (!data) return;
  const colors = ["#2f6db5", "#d9762b", "#3c9a4a", "#8e44ad", "#c0392b", "#5d6678"];
  const traces = data.curves.map((cv, k) => ({ type: "scatter", mode: "lines", name: cv.label, x: cv.rates, y: cv.usd_per_hour,
    line: { shape: "hv", width: 2, color: colors[k % colors.length] }, hovertemplate: "%{x:.2f} req/s: $%{y:.2f}/h<extra>" + cv.label + "</extra>" }));
  if (data.chosen) traces.push({ type: "scatter", mode: "markers", name: "chosen", x: [data.chosen.rate], y: [data.chosen.usd_per_hour],
    marker: { symbol: "star", size: 16, color: "#1d2330" }, hovertemplate: data.chosen.label + "<extra></extra>" });
  plot("#chart-cost", traces, { title: "Cost versus request rate, meeting the SLOs", xaxis: { title: { text: "request rate (req/s)" } },
    yaxis: { title: { text: "$ per hour" }, rangemode: "tozero" }, legend: { orientation: "h", y: -0.25, yanchor: "top", font: { size: 10 } },
    margin: { ...BASE_LAYOUT.margin, b: 150 },
    shapes: [{ type: "line", x0: out.rate, x1: out.rate, yref: "paper", y0: 0, y1: 1, line: { color: "#9aa3b2", dash: "dot", width: 1 } }] });
}

async function simulateDeployment(c, k) {
  if (!lastServe) return;
  for (const tr of $$("#serve-table tbody tr")) tr.classList.toggle("selected", Number(tr.dataset.index) === k);
  const { inp, out } = lastServe;
  const workload = traceText !== null ? { arrival: "trace", rate: out.rate } : { ...inp.workload, rate: out.rate, num_requests: 1200 };
  const body = { model: inp.v.model, precision: inp.v.precision, deployment: c.deployment, workload, slo: inp.slo };
  if (traceText !== null) body.trace_csv = traceText;
  $("#serve-cdf-title").textContent = `Latency CDFs: ${c.description} (simulating…)`;
  try {
    const m = await runJob("/api/serve/simulate?plot=true", body, () => {}).promise;
    $("#serve-cdf-title").textContent = `Latency CDFs: ${m.deployment.join("; ")} — ${fmt.num(m.completed)} requests at ${fmt.sig(out.rate, 4)} req/s, SLO attainment ${fmt.pct(m.slo_attainment)}`;
    $("#serve-yaml").textContent = yamlDoc({ deployment: c.deployment });
    const host = $("#serve-cdfs");
    host.replaceChildren(...m.plot.cdf.map((cdf) => el("div", { class: "chart", "data-metric": cdf.metric })));
    m.plot.cdf.forEach((cdf, j) => {
      const tail = cdf.ms.length && cdf.ms[cdf.ms.length - 1] > 20 * Math.max(cdf.ms[Math.floor(cdf.ms.length / 2)], 1e-9);
      const traces = [{ type: "scatter", mode: "lines", name: cdf.label, x: cdf.ms, y: cdf.fraction, line: { color: "#2f6db5", width: 2 },
        hovertemplate: "%{x:.1f} ms: %{y:.1%}<extra></extra>" }];
      const shapes = cdf.slo_ms ? [{ type: "line", x0: cdf.slo_ms, x1: cdf.slo_ms, yref: "paper", y0: 0, y1: 1, line: { color: "#b3261e", dash: "dash", width: 1.5 } }] : [];
      const p90 = m[`${cdf.metric}_ms`] ? m[`${cdf.metric}_ms`].p90 : null;
      plot(host.children[j], traces, { title: `${cdf.label}${p90 !== null ? ` — p90 ${fmt.num(p90, 1)} ms` : ""}${cdf.slo_ms ? ` (SLO ${cdf.slo_ms} ms)` : ""}`,
        xaxis: { title: { text: "ms" }, type: tail ? "log" : "linear" }, yaxis: { title: { text: "fraction" }, range: [0, 1.02] },
        shapes, showlegend: false, margin: { l: 50, r: 10, t: 34, b: 40 } });
    });
  } catch (err) { $("#serve-cdf-title").textContent = `Latency CDFs: ${err.message}`; }
}

/* ----------------------------------------------------------------- RL post-training tab ------------ */

let RL_EXAMPLES = {};
const RL_DEFAULT_EXAMPLE = "rl-grpo-llama3.1-8b-64xh100";

function getPath(obj, path) { return path.split(".").reduce((o, k) => (o && typeof o === "object" ? o[k] : undefined), obj); }
function setPath(obj, path, value) {
  const keys = path.split("."), last = keys.pop();
  let o = obj;
  for (const k of keys) { if (!o[k] || typeof o[k] !== "object") o[k] = {}; o = o[k]; }
  if (value === undefined) delete o[last]; else o[last] = value;
}

function rlDoc() {
  const text = $("#rl-job").value.trim();
  if (!text) throw new ApiError("job: give an RL job document (load an example)", 422);
  try { return JSON.parse(text); } catch (e) { throw new ApiError(`job: the document is not valid JSON (${e.message})`, 422); }
}

function setRLDoc(doc) { $("#rl-job").value = JSON.stringify(doc, null, 1); rlFieldsFromDoc(); }

/* The quick fields show the document's values (a value the select lacks is added to it). */
function rlFieldsFromDoc() {
  let doc;
  try { doc = rlDoc(); } catch (e) { return; }
  for (const input of $$("#form-rl [data-path]")) {
    const v = getPath(doc, input.dataset.path);
    if (input.tagName === "SELECT") {
      const value = v === undefined ? "" : typeof v === "object" ? "__job__" : String(v);
      if (value && !$$("option", input).some((o) => o.value === value))
        input.append(el("option", { value }, value === "__job__" ? "(the job's mapping)" : value));
      if (value) input.value = value;
    } else input.value = v === undefined || v === null ? "" : v;
  }
}

function rlFieldChanged(input) {
  let doc;
  try { doc = rlDoc(); } catch (err) { return showError("rl", err); }
  const raw = input.value;
  if (raw === "__job__") return;
  const value = raw === "" ? undefined : input.type === "number" ? Number(raw) : raw;
  setPath(doc, input.dataset.path, value);
  if (input.dataset.path === "placement.kind") {  // keep the placement consistent: colocated runs sync on every GPU
    const pl = doc.placement;
    if (value === "colocated") { delete pl.rollout_gpus; pl.mode = "sync"; delete pl.staleness; }
    else if (pl.rollout_gpus === undefined) pl.rollout_gpus = Math.max(1, Math.floor((Number(getPath(doc, "cluster.gpus")) || 2) / 2));
  }
  setRLDoc(doc);
}

function loadRLExample(name) {
  const doc = RL_EXAMPLES[name];
  if (doc) setRLDoc(JSON.parse(JSON.stringify(doc)));
}

const RL_COLORS = [["rollout", "#2f6db5"], ["reward", "#9aa3b2"], ["forward: old", "#d9762b"], ["forward: ref", "#f3bd8c"], ["forward", "#e3c26b"],
  ["train: policy", "#3c9a4a"], ["train", "#9fd4a6"], ["weight sync", "#c0392b"]];
function rlColor(phase) { return (RL_COLORS.find(([k]) => phase.startsWith(k)) || [null, "#5d6678"])[1]; }

function poolLabel(e, pool) {
  if (pool === "all") return `all ${e.pools.all} GPUs`;
  return `${pool} pool (${e.pools[pool]} GPUs)`;
}

function placementLabel(p, pools) {
  const where = p.kind === "split" ? `split ${pools.rollout}+${pools.train}` : `colocated${p.offload ? " offload" : ""}`;
  return `${where} · ${p.mode}${p.mode === "async" ? ` (staleness ${p.staleness})` : ""} · rollout tp${p.rollout_tp}${p.rollout_pp > 1 ? ` pp${p.rollout_pp}` : ""} · train ${p.train_plan}`;
}

function rlCards(e) {
  const idle = Object.entries(e.gpu_idle_fraction).map(([pool, x]) =>
    card(`GPU idle: ${pool === "all" ? "all GPUs" : pool + " pool"}`, fmt.pct(x), `${e.pools[pool]} GPUs, share of the iteration`, "", `idle:${pool}`, x));
  const t = e.memory.train;
  return [
    card("iteration", `${fmt.sig(e.period_s, 4)} s`, `${fmt.num(e.samples)} responses`, "", "period_s", e.period_s),
    card("samples/s", fmt.sig(e.samples_per_s, 4), e.usd_per_1k_samples !== null ? `$${fmt.sig(e.usd_per_1k_samples, 3)} per 1k samples` : null, "", "samples_per_s", e.samples_per_s),
    card("tokens/s generated", fmt.num(e.generated_tokens_per_s), `${fmt.num(e.rollout.output_tokens)} response tokens per iteration`, "", "generated_tokens_per_s", e.generated_tokens_per_s),
    card("tokens/s trained", fmt.num(e.trained_tokens_per_s), `${fmt.num(e.train_batch.tokens)} tokens, ${e.train_batch.optimizer_steps} optimizer steps`, "", "trained_tokens_per_s", e.trained_tokens_per_s),
    ...idle,
    card("rollout batch idle", fmt.pct(e.rollout.drain.batch_idle_fraction), "sequence slots empty as responses finish (the long tail)", "", "batch_idle_fraction", e.rollout.drain.batch_idle_fraction),
    card("training memory", `${fmt.num(t.need_gib, 1)} GiB`, e.fits ? `fits in ${fmt.num(t.usable_gib, 1)} GiB usable` : `does NOT fit in ${fmt.num(t.usable_gib, 1)} GiB`, e.fits ? "good" : "bad", "train_need_gib", t.need_gib),
  ];
}

function rlTimeline(target, e) {
  const pools = [...new Set(e.timeline.map((s) => s.pool))];
  const phases = [...new Set(e.timeline.map((s) => s.phase))];
  const end = Math.max(...e.timeline.map((s) => s.end_s), e.period_s);
  const traces = phases.map((phase) => {
    const segs = e.timeline.filter((s) => s.phase === phase);
    return { type: "bar", orientation: "h", name: phase, y: segs.map((s) => poolLabel(e, s.pool)), base: segs.map((s) => s.start_s),
      x: segs.map((s) => s.end_s - s.start_s), marker: { color: rlColor(phase), line: { color: "#fff", width: 0.5 } },
      customdata: segs.map((s) => [s.start_s, s.end_s]),
      hovertemplate: `${phase}: %{customdata[0]:.2f} → %{customdata[1]:.2f} s (%{x:.2f} s)<extra>%{y}</extra>` };
  });
  const shapes = e.period_s < end - 1e-9 ? [{ type: "line", x0: e.period_s, x1: e.period_s, yref: "paper", y0: 0, y1: 1,
    line: { color: "#1d2330", dash: "dash", width: 1.5 } }] : [];
  const annotations = shapes.length ? [{ x: e.period_s, yref: "paper", y: 1, yanchor: "bottom", text: "next iteration starts", showarrow: false, font: { size: 11 } }] : [];
  $("#rl-timeline-title").textContent = `Timeline of one iteration per pool: ${fmt.sig(e.period_s, 4)} s (${e.placement.kind}, ${e.placement.mode})` +
    (shapes.length ? "; the next iteration starts at the dashed line, overlapping this one's tail" : "");
  plot(target, traces, { title: "", barmode: "overlay",
    xaxis: { title: { text: "seconds from the iteration's start" }, range: [0, end * 1.02] },
    yaxis: { categoryorder: "array", categoryarray: pools.map((p) => poolLabel(e, p)).reverse(), automargin: true },
    height: 170 + 55 * pools.length, shapes, annotations, legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    margin: { ...BASE_LAYOUT.margin, t: 40, b: 44 } });
  $(target).dataset.segments = String(e.timeline.length);
}

function rlDrain(target, e) {
  const curve = e.rollout.drain.running_curve || [];
  const d = e.rollout.drain;
  plot(target, [{ type: "scatter", mode: "lines", name: "generating", x: curve.map((p) => p[0]), y: curve.map((p) => p[1]),
    line: { shape: "hv", color: "#2f6db5", width: 2 }, fill: "tozeroy", hovertemplate: "%{x:.1f} s: %{y:,} responses generating<extra></extra>" }],
    { title: `Rollout drain${e.rollout_window ? " (one batch alone)" : ""}: half the responses done at ${fmt.sig(d.finish_s.p50, 3)} s, the last at ${fmt.sig(d.finish_s.max, 3)} s`,
      xaxis: { title: { text: "seconds into the rollout" } }, yaxis: { title: { text: "responses still generating" }, rangemode: "tozero" }, showlegend: false });
}

function rlTables(e) {
  const rows = Object.entries(e.phases_s).map(([phase, sec]) => {
    const pools = [...new Set(e.timeline.filter((s) => s.phase === phase).map((s) => s.pool))].join(", ");
    return el("tr", { "data-phase": phase, "data-seconds": String(sec) }, el("td", { class: "l" }, el("i", { class: "swatch", style: `background:${rlColor(phase)}` }), phase),
      el("td", { class: "l", text: pools }), el("td", { text: fmt.sig(sec, 4) }), el("td", { text: fmt.pct(sec / e.period_s) }));
  });
  $("#rl-phases").replaceChildren(el("thead", {}, el("tr", {}, ["phase", "pool", "seconds", "of the iteration"].map((h, k) => el("th", { class: k < 2 ? "l" : "", text: h })))),
    el("tbody", {}, rows));
  const m = e.memory, r = m.rollout, t = m.train;
  const resident = Object.entries(t.resident_gib || {}).map(([k, x]) => `${k} ${fmt.num(x, 1)}`).join(", ");
  $("#rl-memory").replaceChildren(el("thead", {}, el("tr", {}, ["phase", "GiB per GPU", "of", "what"].map((h, k) => el("th", { class: k === 0 || k === 3 ? "l" : "", text: h })))),
    el("tbody", {},
      el("tr", { "data-phase": "rollout", "data-gib": String(r.kv_gib_per_gpu + r.resident_gib) }, el("td", { class: "l", text: "rollout" }),
        el("td", { text: fmt.num(r.kv_gib_per_gpu + r.resident_gib, 1) }), el("td", { text: fmt.pct(r.engine_share, 0) + " to the engine" }),
        el("td", { class: "l", text: `KV cache ${fmt.num(r.kv_gib_per_gpu, 1)} (${fmt.num(r.kv_capacity_tokens)} tokens)` + (r.resident_gib ? `; training states kept ${fmt.num(r.resident_gib, 1)}` : "") })),
      el("tr", { "data-phase": "train", "data-gib": String(t.need_gib) }, el("td", { class: "l", text: "training (peak)" }),
        el("td", { text: fmt.num(t.need_gib, 1) }), el("td", { text: `${fmt.num(t.usable_gib, 1)} usable` }),
        el("td", { class: "l", text: `peak while running the ${t.peak_model}` + (resident ? `; others resident: ${resident}` : "") + (m.offload ? "; offloaded between phases" : "") }))));
}

function renderRLEstimate(e) {
  $("#rl-empty").hidden = true; $("#rl-estimate-out").hidden = false;
  $("#rl-title").textContent = `${e.name} on ${e.gpus} GPUs: ${placementLabel(e.placement, e.pools)}`;
  $("#rl-cards").replaceChildren(...rlCards(e).filter(Boolean));
  rlTimeline("#rl-timeline", e);
  rlTables(e);
  rlDrain("#rl-drain", e);
  const w = e.weight_sync_s;
  $("#rl-notes").replaceChildren(el("li", { text: `weight sync ${fmt.sig(w.total_s, 3)} s (gather ${fmt.sig(w.gather_s, 3)}, send ${fmt.sig(w.send_s, 3)}, broadcast ${fmt.sig(w.broadcast_s, 3)} s)` }),
    el("li", { text: rlBatchNote(e.train_batch) }),
    ...e.notes.map((n) => el("li", { text: n })));
}

function rlBatchNote(b) {
  const lay = b.layout;
  const per = `${fmt.num(b.optimizer_steps)} optimizer steps of ${fmt.sig(b.step_time_s, 4)} s`;
  if (!b.packed) return `training batch: padded rows of ${fmt.num(b.seq_len)} tokens; ${per}`;
  return `training batch: ${fmt.num(lay.micro_batches)} micro-batch(es) per rank and step of ≤ ${fmt.num(b.seq_len)} tokens each, ` +
    `costed as rows of ${fmt.num(lay.row_len)} tokens (the attention span); the busiest rank has ${fmt.pct(lay.dp_imbalance - 1)} more work than the mean; ${per}`;
}

async function runRLEstimate() {
  showError("rl", null);
  let doc;
  try { doc = rlDoc(); } catch (err) { return showError("rl", err); }
  writeURL("rl", "estimate");
  busy("rl", true, "#rl-progress");
  setProgress("#rl-progress", { state: "running", message: "estimating", fraction: 0.1 });
  try {
    const e = await post("/api/rl/estimate", doc);
    $("#rl-plan-out").hidden = true;
    renderRLEstimate(e);
  } catch (err) { showError("rl", err); } finally { busy("rl", false, "#rl-progress"); }
}

let rlRun = null, rlChosen = null;

async function runRLPlan() {
  showError("rl", null);
  let doc;
  try { doc = rlDoc(); } catch (err) { return showError("rl", err); }
  const v = formValues("rl");
  const body = { job: doc, top: numberOr(v.top, 5) };
  if (v.max_staleness !== undefined) body.max_staleness = numberOr(v.max_staleness, v.max_staleness);
  writeURL("rl", "plan");
  busy("rl", true, "#rl-progress");
  setProgress("#rl-progress", { state: "queued", position: 0, fraction: 0 });
  rlRun = runJob("/api/rl/plan", body, (snap) => setProgress("#rl-progress", snap));
  try { renderRLPlan(await rlRun.promise, doc); } catch (err) { showError("rl", err); } finally { busy("rl", false, "#rl-progress"); rlRun = null; }
}

function renderRLPlan(out, doc) {
  $("#rl-empty").hidden = true; $("#rl-plan-out").hidden = false;
  const bounded = out.bounded_not_simulated ? ` (${out.bounded_not_simulated} of them bounded below the ranked ones without simulating)` : "";
  $("#rl-plan-summary").textContent = `${out.feasible} of ${out.considered} candidates run${bounded}; searched in ${fmt.sig(out.seconds, 3)} s; ranked by samples/s`;
  const head = ["#", "placement", "iteration s", "samples/s", "tokens/s generated", "GPU idle", "rollout batch idle", "$ / 1k samples"];
  $("#rl-ranked").replaceChildren(el("thead", {}, el("tr", {}, head.map((h, k) => el("th", { class: k === 1 ? "l" : "", text: h })))),
    el("tbody", {}, out.ranked.map((c, k) => el("tr", { "data-rank": k + 1, "data-samples-per-s": String(c.samples_per_s), "data-period": String(c.period_s) },
      el("td", { text: k + 1 }), el("td", { class: "l plan", text: placementLabel(c.placement, c.pools) }),
      el("td", { text: fmt.sig(c.period_s, 4) }), el("td", { text: fmt.sig(c.samples_per_s, 4) }), el("td", { text: fmt.num(c.generated_tokens_per_s) }),
      el("td", { text: Object.entries(c.gpu_idle_fraction).map(([p, x]) => `${p} ${fmt.pct(x)}`).join(", ") }),
      el("td", { text: fmt.pct(c.rollout_batch_idle_fraction) }), el("td", { text: c.usd_per_1k_samples === null ? "–" : fmt.sig(c.usd_per_1k_samples, 3) })))));
  const reasons = Object.entries(out.rejected_by_reason);
  $("#rl-rejects").replaceChildren(el("thead", {}, el("tr", {}, el("th", { class: "l", text: "candidate" }), el("th", { class: "l", text: "why rejected" }))),
    el("tbody", {}, out.rejected.length ? out.rejected.map((r) => el("tr", { "data-candidate": r.candidate }, el("td", { class: "l", text: r.candidate }), el("td", { class: "l", text: r.reason })))
      : [el("tr", {}, el("td", { class: "l", colspan: 2, text: "none: every candidate searched fits and runs" }))]));
  $("#rl-plan-notes").replaceChildren(...reasons.map(([why, n]) => el("li", { text: `${n} × ${why}` })), ...out.notes.map((n) => el("li", { text: n })));
  rlChosen = out.placement_block ? { doc, block: out.placement_block } : null;
  $("#rl-chosen-yaml").textContent = out.placement_block ? yamlDoc(out.placement_block) : "(no placement runs)";
  $("#rl-open-chosen").hidden = !rlChosen;
  if (out.chosen) renderRLEstimate(out.chosen);
  else $("#rl-estimate-out").hidden = true;
}

function openRLChosen() {
  if (!rlChosen) return;
  const { doc, block } = rlChosen;
  const next = { ...doc, placement: block.placement, rollout: { ...(doc.rollout || {}), ...block.rollout }, parallel: block.parallel };
  setRLDoc(next);
  runRLEstimate();
}

/* ----------------------------------------------------------------- start --------------------------- */

function fillSelect(sel, values, selected) {
  $(sel).replaceChildren(...values.map((v) => el("option", { value: v, selected: v === selected }, v)));
}

async function start() {
  try { CATALOG = await (await fetch("/api/catalog")).json(); } catch (e) { document.body.prepend(el("p", { class: "error", text: "cannot load the catalog: " + e.message })); return; }
  const models = CATALOG.models.map((m) => m.name);
  fillSelect("#train-model", models, "llama-3.1-70b");
  fillSelect("#serve-model", models, "llama-3.1-8b");
  fillSelect("#rl-policy", models, "llama-3.1-8b");
  for (const m of CATALOG.models) {
    const label = `${m.name} (${m.params_b >= 1 ? m.params_b.toFixed(m.params_b < 10 ? 1 : 0) : m.params_b.toFixed(2)}B${m.experts ? `, ${m.experts} experts` : ""})`;
    for (const opt of $$(`option[value="${m.name}"]`)) opt.textContent = label;
  }
  fillSelect("#train-gpu", CATALOG.gpus.map((g) => g.name), "H100-SXM");
  fillSelect("#rl-gpu", CATALOG.gpus.map((g) => g.name), "H100-SXM");
  for (const g of CATALOG.gpus) for (const opt of $$(`#train-gpu option[value="${g.name}"], #rl-gpu option[value="${g.name}"]`)) opt.textContent = `${g.name} (${g.memory_gib} GiB)`;
  fillSelect("#train-precision", CATALOG.precisions, "bf16");
  fillSelect("#serve-precision", CATALOG.serving_precisions, "bf16");
  fillSelect("#train-objective", CATALOG.objectives, "throughput");
  fillSelect("#train-schedule", CATALOG.schedules.map((s) => s.name), "1f1b");
  const defaults = new Set(["1f1b", "interleaved", "zb-h1", "zbv"]);
  $("#sched-names").replaceChildren(...CATALOG.schedules.map((s) => el("label", { title: s.description },
    el("input", { type: "checkbox", value: s.name, checked: defaults.has(s.name) }), s.name)));

  for (const t of TABS) $(`#tab-${t}`).addEventListener("click", () => showTab(t));
  $("#form-train").addEventListener("submit", (ev) => { ev.preventDefault(); runEstimate(); });
  $("#train-plan").addEventListener("click", runPlan);
  $("#train-progress .cancel").addEventListener("click", () => planRun && planRun.cancel());
  $("#form-schedule").addEventListener("submit", (ev) => { ev.preventDefault(); runSchedules(); });
  $("#form-serve").addEventListener("submit", (ev) => { ev.preventDefault(); runServePlan(); });
  $("#serve-progress .cancel").addEventListener("click", () => serveRun && serveRun.cancel());
  $("#serve-trace").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    traceText = file ? await file.text() : null;
    $("#serve-trace-name").hidden = !file;
    $("#serve-trace-name").textContent = file ? `trace ${file.name}: ${traceText.split("\n").filter((l) => l.trim()).length - 1} requests (rescaled to the rate)` : "";
  });
  try { RL_EXAMPLES = await (await fetch("/api/rl/examples")).json(); } catch (e) { RL_EXAMPLES = {}; }
  const exampleNames = Object.keys(RL_EXAMPLES);
  $("#rl-example").replaceChildren(el("option", { value: "" }, exampleNames.length ? "(pick one)" : "(none installed)"),
    ...exampleNames.map((n) => el("option", { value: n, selected: n === RL_DEFAULT_EXAMPLE }, n)));
  $("#rl-example").addEventListener("change", (ev) => loadRLExample(ev.target.value));
  for (const input of $$("#form-rl [data-path]")) input.addEventListener("change", () => rlFieldChanged(input));
  $("#rl-job").addEventListener("change", rlFieldsFromDoc);
  $("#form-rl").addEventListener("submit", (ev) => { ev.preventDefault(); runRLEstimate(); });
  $("#rl-plan").addEventListener("click", runRLPlan);
  $("#rl-open-chosen").addEventListener("click", openRLChosen);
  $("#rl-progress .cancel").addEventListener("click", () => rlRun && rlRun.cancel());
  $("#copy-link").addEventListener("click", async () => {
    writeURL(currentTab, null);
    try { await navigator.clipboard.writeText(location.href); $("#copy-link").textContent = "Link copied"; }
    catch (e) { $("#copy-link").textContent = "Link in the address bar"; }
    setTimeout(() => { $("#copy-link").textContent = "Copy link"; }, 1500);
  });

  const params = new URLSearchParams(location.search);
  const tab = TABS.includes(params.get("tab")) ? params.get("tab") : "train";
  fillForm(tab, params);
  if (tab !== "rl" || !params.get("job")) loadRLExample($("#rl-example").value);
  else rlFieldsFromDoc();
  showTab(tab);
  const run = params.get("run");
  if (tab === "train" && run === "estimate") runEstimate();
  else if (tab === "train" && run === "plan") runPlan();
  else if (tab === "schedule" && run === "simulate") runSchedules();
  else if (tab === "serve" && run === "plan") runServePlan();
  else if (tab === "rl" && run === "estimate") runRLEstimate();
  else if (tab === "rl" && run === "plan") runRLPlan();
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", start);

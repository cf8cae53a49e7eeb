// The runs table's pure helpers: how a cell's value is written (the same text as the server's
// template filters in web/templatetags/web_tags.py) and which API query keeps a page live. No DOM
// here, so Node runs the tests (tests/platform/test_run_table_js.py); the page's run_list.js uses
// them as window.RunTableFormat.
(function (root) {
  "use strict";

  // `value` (finite, not 0) to `digits` significant digits as Python rounds them, half to even on
  // an exact tie (1234.5 -> 1234; JS's toExponential would give 1235): [sign, digit string, exponent].
  function significant(value, digits) {
    const sign = value < 0 ? "-" : "";
    const [longMantissa, longExponent] = Math.abs(value).toExponential(Math.min(100, digits + 40)).split("e");
    const all = longMantissa.replace(".", "");
    const tie = /^50*$/.test(all.slice(digits));
    if (tie && Number(all[digits - 1]) % 2 === 0) return [sign, all.slice(0, digits), Number(longExponent)];
    const [mantissa, exponent] = Math.abs(value).toExponential(digits - 1).split("e");
    return [sign, mantissa.replace(".", ""), Number(exponent)];
  }

  // Python's f"{value:.4g}" for a float: 4 significant digits, trailing zeros dropped, exponent
  // form (two digits at least: 1.235e+05) below 1e-4 or from 1e4 on; null -> "-".
  function formatNumber(value, digits = 4) {
    if (value === null || value === undefined || value === "") return "-";
    if (typeof value !== "number") return String(value);
    if (!Number.isFinite(value)) return value > 0 ? "inf" : value < 0 ? "-inf" : "nan";
    if (value === 0) return Object.is(value, -0) ? "-0" : "0";
    const [sign, figures, exponent] = significant(value, digits);
    const trimmed = figures.replace(/0+$/, "") || "0";
    if (exponent < -4 || exponent >= digits) {
      const mantissa = trimmed.length > 1 ? `${trimmed[0]}.${trimmed.slice(1)}` : trimmed;
      return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
    }
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${trimmed}`;
    const whole = trimmed.slice(0, exponent + 1).padEnd(exponent + 1, "0");
    const fraction = trimmed.slice(exponent + 1);
    return `${sign}${whole}${fraction ? "." + fraction : ""}`;
  }

  // The template filter duration_s: 3725.2 -> "1h 02m 05s", 65 -> "1m 05s", 5 -> "5s"; null -> "-".
  function formatDuration(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    const total = Math.abs(seconds % 1) === 0.5 ? 2 * Math.round(seconds / 2) : Math.round(seconds);  // Python's round
    const hours = Math.floor(total / 3600);
    const minutes = Math.floor((total % 3600) / 60);
    const secs = total % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (hours) return `${hours}h ${two(minutes)}m ${two(secs)}s`;
    if (minutes) return `${minutes}m ${two(secs)}s`;
    return `${secs}s`;
  }

  // The template filter when: an ISO 8601 time as "2026-12-02 07:29:41 UTC" (UTC, like the server's
  // pages); null or "" -> "-"; text that is no date, as it is.
  function formatWhen(iso) {
    if (iso === null || iso === undefined || iso === "") return "-";
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    const two = (n) => String(n).padStart(2, "0");
    return `${d.getUTCFullYear()}-${two(d.getUTCMonth() + 1)}-${two(d.getUTCDate())} ` +
      `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} UTC`;
  }

  // The template filter percent: a fraction as a CSS width, one decimal, clamped to [0, 100].
  function percent(fraction) {
    if (!fraction) return "0";
    return (Math.max(0, Math.min(1, Number(fraction))) * 100).toFixed(1);
  }

  // The GET /api/runs query that answers what the page at `search` (location.search) shows: the
  // same filters, sort and metric columns, and the page's slice as limit/offset instead of page.
  function apiQuery(search, perPage) {
    const params = new URLSearchParams(search);
    const page = Math.max(1, parseInt(params.get("page") || "1", 10) || 1);
    params.delete("page");
    params.delete("limit");
    params.delete("offset");
    params.set("limit", String(perPage));
    params.set("offset", String((page - 1) * perPage));
    return params.toString();
  }

  // Whether two lists of run ids are the same runs in the same order (then cells are updated in
  // place; otherwise the rows are rebuilt).
  function sameOrder(a, b) {
    return a.length === b.length && a.every((id, i) => Number(id) === Number(b[i]));
  }

  // The compare page's address for the chosen run ids, or null when fewer than 2 or more than max.
  function compareUrl(base, ids, maxRuns) {
    if (ids.length < 2 || ids.length > maxRuns) return null;
    return `${base}?runs=${ids.map(Number).join(",")}`;
  }

  const api = {formatNumber, formatDuration, formatWhen, percent, apiQuery, sameOrder, compareUrl};
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.RunTableFormat = api;
})(typeof window !== "undefined" ? window : globalThis);

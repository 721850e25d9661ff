// The dashboard's only script: swaps in the server-rendered (escaped) content every 2 s.
// A token given as ?token=T in the page's address is sent as a bearer header, decoded as
// the server decodes it (percent escapes only: a raw `+` stays a `+`, unlike
// URLSearchParams, which would make it a space).
(function () {
  const raw = location.search.slice(1).split("&").find((kv) => kv.startsWith("token="));
  let token = raw ? raw.slice("token=".length) : null;
  try {
    token = token && decodeURIComponent(token);
  } catch (e) {
    // A malformed escape: the server keeps it as written, so does the page.
  }
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const main = document.getElementById("farm");
  async function refresh() {
    try {
      const r = await fetch("/api/fragment", { headers, cache: "no-store" });
      if (r.ok) {
        main.innerHTML = await r.text();
        document.body.dataset.refreshed = String(Date.now());
      }
    } catch (e) {
      document.body.dataset.error = String(e);
    }
  }
  refresh();
  setInterval(refresh, 2000);
})();

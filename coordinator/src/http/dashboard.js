// The dashboard's only script: swaps in the server-rendered (escaped) content every 2 s.
// A token given as ?token=T in the page's address is sent as a bearer header.
(function () {
  const token = new URLSearchParams(location.search).get("token");
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

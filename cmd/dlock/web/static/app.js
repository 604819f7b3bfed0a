// dlock dashboard: polls /api/locks and renders the table. Everything is
// built with textContent: lock names and owners never become markup.
"use strict";
(function () {
  const meta = (n) => document.querySelector('meta[name="' + n + '"]').content;
  const csrf = meta("dlock-csrf");
  const interval = Math.max(500, parseInt(meta("dlock-interval-ms"), 10) || 2000);
  const allowUnlock = meta("dlock-allow-unlock") === "true";
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function who(o) {
    return o.host ? o.host + " · pid " + o.pid : o.owner;
  }

  function ttl(ms) {
    if (ms < 0) return "no TTL";
    if (ms === 0) return "–";
    if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
    return Math.round(ms / 1000) + " s";
  }

  // state fills the state cell: held or free, and a semaphore's permits
  // (size, held by weight, free) or a latch's count.
  function state(l) {
    const st = el("td", "state");
    if (l.type === "latch") {
      st.appendChild(el("span", "badge " + (l.locked ? "held" : "free"), "count " + l.count));
      return st;
    }
    st.appendChild(el("span", "badge " + (l.locked ? "held" : "free"), l.locked ? "held" : "free"));
    if (l.type === "semaphore") {
      const p = el("span", "permits", l.taken + " of " + l.permits + " held · " + l.free + " free");
      p.title = "size " + l.permits + ": permits held, by weight, and free";
      st.appendChild(p);
    }
    return st;
  }

  function row(l, now) {
    const tr = el("tr");
    tr.dataset.name = l.name;
    tr.appendChild(el("td", "name", l.name));
    const kind = l.kind ? (l.kind === "rwlock" ? "rwlock (" + (l.mode || "?") + ")" : l.kind) : "–";
    tr.appendChild(el("td", "kind kind-" + (l.kind || "none"), kind));
    tr.appendChild(state(l));

    const h = el("td", "holders");
    if (l.holders.length === 0) h.appendChild(el("span", "muted", "–"));
    const ul = el("ul", "who");
    for (const x of l.holders) {
      const li = el("li", "holder", who(x) + (x.count > 1 ? " · ×" + x.count : ""));
      li.title = x.owner;
      if (x.renewals > 0) {
        // A hold the watchdog renewed: how long it has lasted.
        const long = el("span", "held-for", " · held " + ttl(x.held_for_ms) + ", " + x.renewals + (x.renewals === 1 ? " renewal" : " renewals"));
        long.title = "granted " + ttl(x.held_for_ms) + " ago and renewed " + x.renewals + " times";
        li.appendChild(long);
      }
      ul.appendChild(li);
    }
    h.appendChild(ul);
    tr.appendChild(h);

    tr.appendChild(el("td", "ttl num", l.locked ? ttl(l.ttl_ms) : "–"));
    tr.appendChild(el("td", "token num", l.token ? String(l.token) : "–"));

    const w = el("td", "waiters");
    const n = l.waiters.length + (l.more_waiters || 0) + (l.waiting_writers || 0);
    if (l.type === "latch") {
      // A latch's waiters listen on its channel: Redis keeps no list of them.
      w.appendChild(el("span", "muted", "–"));
      w.title = "a latch's waiters are not recorded in Redis";
    } else {
      w.appendChild(el("span", "waiter-count", n + " waiting"));
    }
    if (l.waiters.length > 0) {
      const wl = el("ul", "who");
      for (const x of l.waiters) {
        const li = el("li", "waiter", "#" + x.position + " " + who(x));
        li.title = x.owner;
        wl.appendChild(li);
      }
      w.appendChild(wl);
    }
    tr.appendChild(w);

    if (allowUnlock) {
      const td = el("td", "action");
      if (l.locked && (l.type || "lock") === "lock") {
        const b = el("button", "unlock", "Force unlock");
        b.type = "button";
        b.addEventListener("click", () => unlock(l));
        td.appendChild(b);
      }
      tr.appendChild(td);
    }
    return tr;
  }

  async function unlock(l) {
    const holders = l.holders.map(who).join(", ") || "nobody";
    if (!window.confirm("Force-unlock " + l.name + " held by " + holders +
        "?\n\nThe holder is not asked: it learns of it at its next renewal, and until then two processes may both believe they hold the lock.")) {
      return;
    }
    try {
      const r = await fetch("/api/unlock", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Dlock-Csrf": csrf },
        body: JSON.stringify({ name: l.name }),
        credentials: "same-origin",
      });
      const body = await r.json();
      setStatus(body.message, !r.ok);
    } catch (e) {
      setStatus("unlock failed: " + e, true);
    }
    refresh();
  }

  function setStatus(text, isError) {
    const s = $("status");
    s.textContent = text;
    s.className = "status" + (isError ? " error" : "");
  }

  function fmt(v, unit) {
    return (Math.round(v * 100) / 100) + (unit || "");
  }

  function render(s) {
    const tbody = $("rows");
    const rows = document.createDocumentFragment();
    for (const l of s.locks) rows.appendChild(row(l));
    tbody.replaceChildren(rows);
    const held = s.locks.filter((l) => l.locked).length;
    const waiters = s.locks.reduce((n, l) => n + l.waiters.length + (l.more_waiters || 0) + (l.waiting_writers || 0), 0);
    $("count-locks").textContent = String(s.locks.length + s.more);
    $("count-held").textContent = String(held);
    $("count-waiters").textContent = String(waiters);
    $("refreshed").textContent = new Date(s.at).toLocaleTimeString() + " (#" + s.refresh + ")";
    $("cost").textContent = s.commands + " (" + s.cost.scans + " SCAN, " + s.cost.hash_probes + " HRANDFIELD, " +
      s.cost.inspect_cmds + " in " + s.cost.reads + " MULTI)";
    const more = $("more");
    more.hidden = s.more === 0;
    more.textContent = s.more > 0 ? s.more + " more locks not shown (raise --max-locks)" : "";
    if (s.error) setStatus(s.error, true);
    else if (s.locks.length === 0) setStatus("no locks found", false);
    else setStatus(s.locks.length + " locks", false);
    if (s.metrics && $("metrics")) {
      const m = s.metrics;
      if (m.error) {
        $("m-status").textContent = m.error;
      } else if (!m.ready) {
        $("m-status").textContent = "collecting a second sample of " + m.url;
      } else {
        $("m-grants").textContent = fmt(m.grants_per_sec);
        $("m-attempts").textContent = fmt(m.attempts_per_sec);
        $("m-timeouts").textContent = fmt(m.wait_timeouts_per_sec);
        $("m-wait").textContent = fmt(m.wait_avg_ms, " ms");
        $("m-status").textContent = m.url + " over " + fmt(m.window_ms / 1000, " s");
      }
      $("m-held").textContent = fmt(m.held);
    }
  }

  let timer = null;
  async function refresh() {
    clearTimeout(timer);
    try {
      const r = await fetch("/api/locks", { credentials: "same-origin" });
      if (!r.ok) throw new Error(r.status + " " + r.statusText);
      render(await r.json());
    } catch (e) {
      setStatus("cannot reach the dashboard server: " + e.message, true);
    }
    timer = setTimeout(refresh, interval);
  }
  refresh();
})();

/* site.js -- what pkgdown.js (pkgdown 2.0.7) does for a reader, without the
   five scripts it takes from a CDN (bootstrap-toc, headroom, clipboard.js,
   fuse, autocomplete, mark.js), none of which Debian packages: an offline
   build must not fetch them and an offline reader cannot. Bootstrap 5 itself
   is a local file of the site. What is left out: the navbar hiding on scroll
   (headroom) and search (this site's navbar has no search box). */
document.addEventListener("DOMContentLoaded", function () {
  var toc = document.getElementById("toc");

  /* "On this page": the main column's h2 and h3 headings, in the markup
     bootstrap-toc writes (pkgdown.scss styles #toc > .nav). A heading
     marked data-toc-skip (subtitle, author, date) stays out. */
  if (toc) {
    var list = function () {
      var ul = document.createElement("ul");
      ul.className = "nav flex-column";
      return ul;
    };
    var top = list(), sub = null;
    document.querySelectorAll("main h2, main h3").forEach(function (h) {
      if (!h.id || h.hasAttribute("data-toc-skip")) return;
      var li = document.createElement("li"), a = document.createElement("a");
      a.className = "nav-link";
      a.href = "#" + h.id;
      a.textContent = h.textContent.trim();
      li.appendChild(a);
      if (h.tagName === "H2" || !top.lastChild) {
        top.appendChild(li);
        sub = null;
      } else {
        if (!sub) { sub = list(); top.lastChild.appendChild(sub); }
        sub.appendChild(li);
      }
    });
    if (top.childNodes.length) {
      toc.appendChild(top);
      var nav = document.querySelector("nav.navbar");
      new bootstrap.ScrollSpy(document.body, {
        target: "#toc", offset: (nav ? nav.offsetHeight : 0) + 1
      });
    } else {
      toc.parentNode.removeChild(toc);
    }
  }

  document.querySelectorAll('[data-bs-toggle="popover"]').forEach(function (el) {
    new bootstrap.Popover(el, {container: "body", html: true, trigger: "focus",
                               placement: "top", sanitize: false});
  });
  document.querySelectorAll('[data-bs-toggle="tooltip"]').forEach(function (el) {
    new bootstrap.Tooltip(el);
  });

  /* A copy button on each code chunk (the browser's clipboard API, where the
     page is a secure context: https, localhost or a file), copying the code
     without the "#>" output lines, as pkgdown.js does. */
  if (navigator.clipboard && window.isSecureContext) {
    document.querySelectorAll("div.sourceCode").forEach(function (div) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "btn btn-primary btn-copy-ex";
      button.title = "Copy to clipboard";
      button.setAttribute("aria-label", "Copy to clipboard");
      button.innerHTML = "<i class='fa fa-copy'></i>";
      button.addEventListener("click", function () {
        var text = div.textContent.replace(/\n#>[^\n]*/g, "");
        navigator.clipboard.writeText(text).then(function () {
          button.title = "Copied!";
        });
      });
      div.classList.add("hasCopyButton");
      div.insertBefore(button, div.firstChild);
    });
  }
});

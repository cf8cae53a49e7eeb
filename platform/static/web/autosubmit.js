// Submit a form when one of its <select data-autosubmit> changes (no inline handlers: the
// Content-Security-Policy allows scripts from this site's files only).
"use strict";
document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
  select.addEventListener("change", () => select.form.submit());
});

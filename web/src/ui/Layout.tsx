// The frame of every signed-in page: the navigation and the page. On a
// phone the sections fold into a menu (a button that opens them as a
// list); on a wider screen they are a row.
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { signOut } from "../api/auth";
import type { WhoAmI } from "../api/types";
import { forgetMe, isAdmin, isFleet, useMe } from "../lib/useMe";
import { navigate } from "../router";

type Section = { href: string; label: string; may?: (me?: WhoAmI) => boolean };

export const sections: Section[] = [
  { href: "/tasks", label: "Tasks" },
  { href: "/sessions", label: "Sessions" },
  { href: "/profiles", label: "Profiles" },
  { href: "/automations", label: "Automations" },
  { href: "/images", label: "Images" },
  { href: "/harnesses", label: "Harnesses" },
  { href: "/secrets", label: "Secrets", may: isAdmin },
  { href: "/people", label: "People", may: isAdmin },
  { href: "/audit", label: "Audit log", may: isAdmin },
  { href: "/hosts", label: "Hosts", may: isFleet },
  { href: "/settings", label: "Settings", may: isAdmin },
  { href: "/account", label: "Account" },
];

export function Layout(props: { path: string; children: ComponentChildren }) {
  const [open, setOpen] = useState(false);
  // A followed link closes the menu, also one to the page shown.
  useEffect(() => setOpen(false), [props.path]);
  const followed = (e: MouseEvent) => (e.target as Element).closest("a") && setOpen(false);
  const me = useMe();
  const shown = sections.filter((s) => !s.may || s.may(me));
  const current = shown.find((s) => props.path.startsWith(s.href));
  return (
    <div class="frame">
      <header class="top">
        <a class="brand" href="/tasks">
          engrams
        </a>
        <span class="here" aria-hidden="true">
          {current?.label}
        </span>
        <button type="button" class="quiet menu-button" aria-expanded={open} aria-controls="sections" onClick={() => setOpen(!open)}>
          Menu
        </button>
        <nav id="sections" aria-label="Sections" class={open ? "open" : undefined} onClick={followed}>
          {shown.map((s) => (
            <a href={s.href} aria-current={current === s ? "page" : undefined}>
              {s.label}
            </a>
          ))}
          <button
            type="button"
            class="quiet sign-out"
            onClick={async () => {
              await signOut(); // a cookie sign-in stops working here and now
              forgetMe();
              navigate("/login");
            }}
          >
            Sign out
          </button>
        </nav>
      </header>
      <main id="main">{props.children}</main>
    </div>
  );
}

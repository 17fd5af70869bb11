// The frame of every signed-in page: the navigation and the page.
import type { ComponentChildren } from "preact";
import { signOut } from "../api/auth";
import { navigate } from "../router";

const sections = [
  { href: "/tasks", label: "Tasks" },
  { href: "/sessions", label: "Sessions" },
  { href: "/profiles", label: "Profiles" },
  { href: "/automations", label: "Automations" },
  { href: "/images", label: "Images" },
  { href: "/harnesses", label: "Harnesses" },
  { href: "/secrets", label: "Secrets" },
  { href: "/hosts", label: "Hosts" },
  { href: "/settings", label: "Settings" },
];

export function Layout(props: { path: string; children: ComponentChildren }) {
  return (
    <div class="frame">
      <header class="top">
        <a class="brand" href="/tasks">
          engrams
        </a>
        <nav aria-label="Sections">
          {sections.map((s) => (
            <a href={s.href} aria-current={props.path.startsWith(s.href) ? "page" : undefined}>
              {s.label}
            </a>
          ))}
        </nav>
        <button
          class="quiet"
          onClick={() => {
            signOut();
            navigate("/login");
          }}
        >
          Sign out
        </button>
      </header>
      <main id="main">{props.children}</main>
    </div>
  );
}

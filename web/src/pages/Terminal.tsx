// A terminal in a session: xterm.js over the exec WebSocket with a PTY
// (a login shell), resized with its container.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { token } from "../api/auth";
import { enc } from "../api/client";

const stdin = 0;

// loginShell starts the image's login shell on the PTY as it is: bash if
// the image has it, else sh, with stderr (where shells write the prompt
// and the echo of what is typed) on the terminal. The script is fixed
// text; nothing from the page goes into it.
const loginShell = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi\nexec sh -l";

// theme is xterm's palette with each colour readable on the black
// background (contrast at least 4.5:1, WCAG AA), so programs' colours are.
const theme = {
  background: "#000000",
  foreground: "#e5e5e5",
  cursor: "#e5e5e5",
  red: "#ff5f5f",
  green: "#5fd75f",
  yellow: "#d7d75f",
  blue: "#6f9fff",
  magenta: "#ff79ff",
  cyan: "#5fd7d7",
  white: "#e5e5e5",
  brightBlack: "#8a8a8a",
  brightRed: "#ff8787",
  brightGreen: "#87ff87",
  brightYellow: "#ffff87",
  brightBlue: "#9fbfff",
  brightMagenta: "#ffafff",
  brightCyan: "#87ffff",
  brightWhite: "#ffffff",
};

export function Terminal(props: { sessionId: string; dir?: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting…");
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const term = new XTerm({ cursorBlink: true, fontSize: 13, convertEol: false, scrollback: 5000, theme });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el);
    fit.fit();
    const url = location.origin.replace(/^http/, "ws") + "/v1/sessions/" + enc(props.sessionId) + "/exec/ws";
    const key = token(); // a pasted key; a cookie sign-in goes with the upgrade
    const ws = new WebSocket(url, key ? ["engrams.v1", "bearer." + key] : ["engrams.v1"]);
    ws.binaryType = "arraybuffer";
    const enc8 = new TextEncoder();
    const frame = (ch: number, data: Uint8Array) => {
      const b = new Uint8Array(data.length + 1);
      b[0] = ch;
      b.set(data, 1);
      return b;
    };
    ws.onopen = () => {
      ws.send(JSON.stringify({ argv: ["/bin/sh", "-c", loginShell], tty: true, stdin: true, rows: term.rows, cols: term.cols, dir: props.dir }));
      setStatus("connected");
      term.focus();
    };
    ws.onmessage = (m) => {
      if (typeof m.data === "string") {
        const c = JSON.parse(m.data) as { type: string; exit_code?: number; error?: string };
        if (c.type === "exit") setStatus(c.error ? "ended: " + c.error : "exited with " + c.exit_code);
        return;
      }
      const b = new Uint8Array(m.data as ArrayBuffer);
      if (b.length > 1 && b[0] !== stdin) term.write(b.subarray(1));
    };
    ws.onclose = () => setStatus((s) => (s === "connected" ? "disconnected" : s));
    ws.onerror = () => setStatus("could not connect");
    const data = term.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(frame(stdin, enc8.encode(d))));
    const resize = term.onResize(({ rows, cols }) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: "resize", rows, cols })));
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(el);
    return () => {
      ro.disconnect();
      data.dispose();
      resize.dispose();
      ws.close();
      term.dispose();
    };
  }, [props.sessionId, props.dir]);
  return (
    <div class="terminal">
      <p class="muted small" role="status" data-testid="terminal-status">
        Terminal: {status}
      </p>
      <div ref={box} class="term" data-testid="terminal" />
    </div>
  );
}

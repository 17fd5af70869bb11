// The live conversation of a task: streamed assistant text as Markdown,
// tool calls folded with their results, errors in place, and the
// follow-up box (Enter sends, Shift+Enter breaks the line, Esc
// interrupts); prompts sent while the agent works are queued.
import { useEffect, useRef, useState } from "preact/hooks";
import { enc, post } from "../api/client";
import type { Conversation, Item } from "../lib/conversation";
import type { TurnUsage } from "../api/types";
import { money, tokens } from "../lib/format";
import { toolSubject } from "../lib/toolSubject";
import { Markdown } from "../ui/Markdown";
import { Problem } from "../ui/Problem";

export function TaskConversation(props: { taskId: string; sessionId?: string; conv: Conversation; stopped: boolean; turn?: string }) {
  const [text, setText] = useState("");
  const [error, setError] = useState<Error>();
  const end = useRef<HTMLDivElement>(null);
  useEffect(() => end.current?.scrollIntoView({ block: "end" }), [props.conv.items.length]);

  const send = async () => {
    const t = text.trim();
    if (!t) return;
    setError(undefined);
    try {
      await post("/v1/tasks/" + enc(props.taskId) + "/messages", { text: t });
      setText("");
    } catch (e) {
      setError(e as Error);
    }
  };
  const interrupt = async () => {
    if (!props.sessionId) return;
    try {
      await post("/v1/sessions/" + enc(props.sessionId) + "/outbox", {
        id: "interrupt-" + crypto.randomUUID(),
        kind: "harness.interrupt",
        payload: props.turn ? { turn: props.turn } : {},
      });
    } catch (e) {
      setError(e as Error);
    }
  };

  return (
    <div class="conversation">
      <ol class="messages" aria-label="Conversation" aria-live="polite">
        {props.conv.items.map((i) => (
          <li key={i.seq}>{render(i)}</li>
        ))}
      </ol>
      {props.conv.working && (
        <p class="working" role="status">
          <span class="spinner" aria-hidden="true" /> The agent is working…{" "}
          <button class="quiet" onClick={interrupt} title="Esc">
            Interrupt
          </button>
        </p>
      )}
      <div ref={end} />
      {!props.stopped && (
        <form
          class="followup"
          onSubmit={(e) => {
            e.preventDefault();
            void send();
          }}
        >
          <label for="followup" class="sr-only">
            Follow-up
          </label>
          <textarea
            id="followup"
            rows={2}
            value={text}
            placeholder={props.conv.working ? "Queue a follow-up (sent when this turn ends)" : "Send a follow-up"}
            onInput={(e) => setText(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === "Enter" && !e.shiftKey) {
                e.preventDefault();
                void send();
              } else if (e.key === "Escape" && props.conv.working) {
                e.preventDefault(); // only a running turn is interrupted: an interrupt would resume a suspended session
                void interrupt();
              }
            }}
          />
          <button type="submit">Send</button>
        </form>
      )}
      <Problem error={error} />
    </div>
  );
}

function render(i: Item) {
  switch (i.kind) {
    case "prompt":
      return <div class="msg user">{i.text}</div>;
    case "text":
      return (
        <div class="msg agent" data-testid="assistant-text">
          <Markdown text={i.text} />
        </div>
      );
    case "tool":
      return (
        <details class={"tool" + (i.isError ? " failed" : "")}>
          <summary>
            <code>{i.name}</code> {toolSubject(i.input) && <code class="tool-subject">{toolSubject(i.input)}</code>}{" "}
            {i.output === undefined ? <em>running…</em> : i.isError ? "failed" : "done"}
          </summary>
          {i.input && <pre>{i.input}</pre>}
          {i.output !== undefined && <pre class="output">{i.output}</pre>}
        </details>
      );
    case "question":
      return <div class="msg question">{i.text}</div>;
    case "error":
      return (
        <div class="msg problem" role="alert">
          {i.text}
        </div>
      );
    case "usage":
      return <UsageLine u={i.usage} />;
    case "idle":
      return <div class="turn-end">Turn done{i.ms ? " in " + (i.ms / 1000).toFixed(1) + " s" : ""}</div>;
    case "note":
      return <div class="note">{i.text}</div>;
  }
}

/** UsageLine says one usage event of a turn: model, tokens, cost and the
 * price table the cost came from. */
function UsageLine(props: { u: TurnUsage }) {
  const u = props.u;
  const table = u.price_table === "harness" ? "reckoned by the harness" : u.price_table ? "price table " + u.price_table : "";
  return (
    <div class="note usage" data-testid="turn-usage">
      {u.model ? u.model + " · " : ""}
      {tokens(u)} tokens · {u.cost ? money(u.cost) : "not priced"}
      {u.cost && table ? <span class="muted"> ({table})</span> : null}
    </div>
  );
}

// Assistant text rendered as Markdown, sanitized (the agent's output is
// untrusted: no scripts, no event handlers, links open elsewhere).
import DOMPurify from "dompurify";
import { marked } from "marked";
import { useMemo } from "preact/hooks";

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function Markdown(props: { text: string }) {
  const html = useMemo(() => DOMPurify.sanitize(marked.parse(props.text, { async: false, gfm: true, breaks: false }) as string), [props.text]);
  return <div class="md" dangerouslySetInnerHTML={{ __html: html }} />;
}

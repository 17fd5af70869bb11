// Syntax highlighting of diff lines, by the file's extension, with a few
// of highlight.js's languages (the rest are plain text).
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import css from "highlight.js/lib/languages/css";
import go from "highlight.js/lib/languages/go";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdown from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

const langs = { bash, css, go, javascript, json, markdown, python, rust, typescript, xml, yaml };
for (const [name, l] of Object.entries(langs)) hljs.registerLanguage(name, l);

const byExt: Record<string, string> = {
  sh: "bash", bash: "bash", css: "css", go: "go", js: "javascript", mjs: "javascript", jsx: "javascript",
  json: "json", md: "markdown", py: "python", rs: "rust", ts: "typescript", tsx: "typescript",
  html: "xml", xml: "xml", svg: "xml", yaml: "yaml", yml: "yaml",
};

export function languageOf(path: string): string | undefined {
  const ext = path.split(".").pop()?.toLowerCase() ?? "";
  return byExt[ext];
}

/** highlight returns sanitized HTML for one line (hljs escapes the text). */
export function highlight(line: string, lang?: string): string {
  if (!lang) return escape(line);
  return hljs.highlight(line, { language: lang, ignoreIllegals: true }).value;
}

function escape(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

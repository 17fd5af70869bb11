// A tab list (arrow keys move between tabs).
export function Tabs(props: { tabs: { id: string; label: string }[]; current: string; onSelect: (id: string) => void }) {
  const keys = (e: KeyboardEvent) => {
    const i = props.tabs.findIndex((t) => t.id === props.current);
    const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (!d) return;
    e.preventDefault();
    const next = props.tabs[(i + d + props.tabs.length) % props.tabs.length];
    props.onSelect(next.id);
    // Focus follows the selected tab (a refused switch keeps it).
    const list = e.currentTarget as HTMLElement;
    requestAnimationFrame(() => list.querySelector<HTMLElement>('[aria-selected="true"]')?.focus());
  };
  return (
    <div class="tabs" role="tablist" onKeyDown={keys}>
      {props.tabs.map((t) => (
        <button
          type="button"
          role="tab"
          id={"tab-" + t.id}
          aria-selected={t.id === props.current}
          aria-controls={"panel-" + t.id}
          tabIndex={t.id === props.current ? 0 : -1}
          onClick={() => props.onSelect(t.id)}
        >
          {t.label}
        </button>
      ))}
    </div>
  );
}

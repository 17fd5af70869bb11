// useLoad runs a read when its key changes and keeps its value, error and
// a reload function (for after an action).
import { useCallback, useEffect, useState } from "preact/hooks";

export type Loaded<T> = { value?: T; error?: Error; loading: boolean; reload: () => void; set: (v: T) => void };

export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, key: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ value?: T; error?: Error; loading: boolean }>({ loading: true });
  const [n, setN] = useState(0);
  useEffect(() => {
    const ctl = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    load(ctl.signal).then(
      (value) => !ctl.signal.aborted && setState({ value, loading: false }),
      (error: Error) => !ctl.signal.aborted && setState((s) => ({ ...s, error, loading: false })),
    );
    return () => ctl.abort();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...key, n]);
  const reload = useCallback(() => setN((x) => x + 1), []);
  const set = useCallback((value: T) => setState({ value, loading: false }), []);
  return { ...state, reload, set };
}

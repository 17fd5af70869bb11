// Lazy loads a page part's module on first use (the terminal emulator and
// the syntax highlighter stay out of the first paint's bundle).
import type { ComponentType } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Loading } from "./Problem";

export function lazy<P extends object>(load: () => Promise<ComponentType<P>>, what: string): ComponentType<P> {
  let loaded: ComponentType<P> | undefined;
  return function Lazy(props: P) {
    const [C, setC] = useState<ComponentType<P> | undefined>(() => loaded);
    useEffect(() => {
      if (!C) void load().then((c) => setC(() => (loaded = c)));
    }, [C]);
    return C ? <C {...props} /> : <Loading what={what} />;
  };
}

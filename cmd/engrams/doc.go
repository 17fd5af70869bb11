// Command engrams is the CLI, a coordinator replica (`server`), the host agent
// (`host run`) and the single-process development install (`dev`). It picks the
// store, blob and vmm backends from flags.
package main

import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

// The build lands in the Go package that embeds it (internal/dashboard),
// committed so a fresh clone's `go build` serves the dashboard.
export default defineConfig({
  plugins: [preact()],
  build: {
    outDir: "../internal/dashboard/static.gen",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
  server: { proxy: { "/v1": "http://127.0.0.1:7700" } },
});

// Package dashboard serves the web dashboard (the single-page app built from web/ into
// static.gen/) at / with its one-time login codes. Only internal/server and cmd/ import it.
package dashboard

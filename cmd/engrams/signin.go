package main

import (
	"errors"
	"log/slog"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/signin"
)

// signinFlags configure sign-in with the organisation's identity provider.
type signinFlags struct {
	issuer, clientID, clientSecret, secretFile, cliClientID, publicURL string
	cfg                                                                signin.Config
}

func (f *signinFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.issuer, "oidc-issuer", env("OIDC_ISSUER", ""), "OpenID Connect issuer URL: the dashboard signs in with it, `engrams login` by its device flow (default: none; login links and API keys)")
	fs.StringVar(&f.clientID, "oidc-client-id", env("OIDC_CLIENT_ID", ""), "the dashboard's client id at the provider (redirect URI: <public URL>/v1/auth/oidc/callback)")
	fs.StringVar(&f.clientSecret, "oidc-client-secret", env("OIDC_CLIENT_SECRET", ""), "the dashboard client's secret (none for a public client)")
	fs.StringVar(&f.secretFile, "oidc-client-secret-file", env("OIDC_CLIENT_SECRET_FILE", ""), "file holding --oidc-client-secret")
	fs.StringVar(&f.cliClientID, "oidc-cli-client-id", env("OIDC_CLI_CLIENT_ID", ""), "the CLI's public client id, with the device flow enabled (default: --oidc-client-id)")
	fs.StringVar(&f.publicURL, "public-url", env("PUBLIC_URL", ""), "the URL browsers use to reach engrams (default: --advertise-url); https makes sign-in cookies Secure")
	fs.DurationVar(&f.cfg.IdleTimeout, "signin-idle-timeout", envDuration("SIGNIN_IDLE_TIMEOUT", 0), "a browser sign-in unused this long ends (default 12h)")
	fs.DurationVar(&f.cfg.MaxAge, "signin-max-age", envDuration("SIGNIN_MAX_AGE", 0), "a browser sign-in ends this long after it began (default 168h)")
	fs.DurationVar(&f.cfg.CLIKeyTTL, "cli-key-ttl", envDuration("CLI_KEY_TTL", 0), "a key `engrams login` makes expires after this (default 2160h)")
}

// config is the sign-in configuration, refused here when incomplete.
func (f *signinFlags) config(advertise string, log *slog.Logger) (signin.Config, error) {
	c := f.cfg
	secret, err := secretFlag("oidc-client-secret", f.clientSecret, f.secretFile, log)
	if err != nil {
		return c, err
	}
	c.Issuer, c.ClientID, c.ClientSecret, c.CLIClientID, c.BaseURL = f.issuer, f.clientID, secret, f.cliClientID, f.publicURL
	if c.BaseURL == "" {
		c.BaseURL = advertise
	}
	if c.Issuer == "" {
		if c.ClientID != "" || secret != "" {
			return c, errors.New("--oidc-client-id needs --oidc-issuer")
		}
		return c, nil
	}
	if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return c, errors.New("--oidc-issuer must be an http(s) URL, e.g. https://login.example.com")
	}
	if c.ClientID == "" {
		return c, errors.New("--oidc-issuer needs --oidc-client-id")
	}
	return c, nil
}

package cli

// The config file (URL and key) and `engrams login`, which fills it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
	"golang.org/x/term"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// clientConfig is the file `engrams dev` writes for the CLI.
type clientConfig struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// DefaultConfigPath returns $ENGRAMS_CONFIG, or engrams/config.json in the
// user config directory (os.UserConfigDir).
func DefaultConfigPath() (string, error) {
	return configPath(os.Getenv)
}

func configPath(getenv func(string) string) (string, error) {
	if p := getenv("ENGRAMS_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user config directory: %w (set ENGRAMS_CONFIG)", err)
	}
	return filepath.Join(dir, "engrams", "config.json"), nil
}

// WriteClientConfig writes the URL and token the CLI uses by default to
// path (see DefaultConfigPath), readable only by the user (mode 0600; its
// directory is created 0700). The file is replaced atomically.
func WriteClientConfig(path, url, token string) error {
	b, err := json.MarshalIndent(clientConfig{URL: url, Token: token}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode client config: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	return nil
}

// readClientConfig reads the config file; a missing file is an empty config.
func readClientConfig(getenv func(string) string) (clientConfig, error) {
	var cfg clientConfig
	path, err := configPath(getenv)
	if err != nil {
		return cfg, nil // nowhere to look: flags and env are all there is
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read client config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("read client config %s: %w (fix or delete it, or run `engrams dev` again)", path, err)
	}
	return cfg, nil
}

// loginCmds is `engrams login`.
type loginCmds struct{ *app }

func (a loginCmds) loginCmd() *cobra.Command {
	var (
		withKey   bool
		name, org string
	)
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign the CLI in: with your identity provider, or by pasting an API key",
		Long: `Sign the CLI in to a coordinator and save its URL and a key in the config
file ($ENGRAMS_CONFIG, or engrams/config.json in your user config directory).

Where the coordinator has an identity provider, login runs its device flow:
it prints a link and a code, you confirm them in a browser, and engrams
makes a personal key with your role that expires (90 days by default).
Where it has none, or with --key, paste an API key (engrams token create,
or the dashboard's Keys page); it is checked before it is saved.`,
		Example: `  engrams login --url https://engrams.example.com
  engrams login --url http://127.0.0.1:7700 --key
  echo "$KEY" | engrams login --url https://engrams.example.com --key
  engrams login --org org-1234 --name laptop`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := firstNonEmpty(a.url, a.opts.Getenv("ENGRAMS_URL"))
			if url == "" {
				cfg, err := readClientConfig(a.opts.Getenv)
				if err != nil {
					return err
				}
				url = cfg.URL
			}
			if url == "" {
				return usageError{errors.New("say which coordinator: engrams login --url https://engrams.example.com")}
			}
			anon := client.New(url, "", client.WithHTTPClient(a.opts.HTTPClient), client.WithUserAgent("engrams-cli/"+a.opts.Version))
			if withKey {
				return a.pasteKey(cmd, url)
			}
			cfg, err := anon.SignIn().Config(cmd.Context())
			if err != nil {
				return fmt.Errorf("ask %s how to sign in: %w", url, err)
			}
			if !cfg.OIDC {
				fmt.Fprintln(cmd.ErrOrStderr(), "This coordinator has no identity provider: sign in with an API key (engrams token create, or the dashboard's Keys page).")
				return a.pasteKey(cmd, url)
			}
			return a.deviceFlow(cmd, anon, cfg, apiv1.CLISignInRequest{Name: name, Org: org})
		},
	}
	cmd.Flags().BoolVar(&withKey, "key", false, "paste an API key instead of signing in with the identity provider")
	cmd.Flags().StringVar(&name, "name", "", "the new key's name (default cli-<date>)")
	cmd.Flags().StringVar(&org, "org", "", "the organisation to sign in to, when you are in several (its id)")
	return cmd
}

// deviceFlow signs in by the provider's device flow (RFC 8628) and trades
// the ID token for a key.
func (a loginCmds) deviceFlow(cmd *cobra.Command, anon *client.Client, cfg apiv1.AuthConfig, req apiv1.CLISignInRequest) error {
	if cfg.DeviceAuthURL == "" {
		return errors.New("the identity provider offers no device flow: sign in with an API key (engrams login --key)")
	}
	oc := &oauth2.Config{ClientID: cfg.CLIClientID, Scopes: cfg.Scopes,
		Endpoint: oauth2.Endpoint{DeviceAuthURL: cfg.DeviceAuthURL, TokenURL: cfg.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
	ctx := context.WithValue(cmd.Context(), oauth2.HTTPClient, a.opts.HTTPClient)
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return fmt.Errorf("start the device sign-in at %s: %w", cfg.Issuer, err)
	}
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "To sign in, open %s\nand enter the code %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(out, "(or open %s)\n", da.VerificationURIComplete)
	}
	fmt.Fprintln(out, "Waiting for you to confirm…")
	if da.Expiry.IsZero() {
		da.Expiry = a.opts.Now().Add(10 * time.Minute)
	}
	tok, err := oc.DeviceAccessToken(ctx, da)
	if err != nil {
		return fmt.Errorf("device sign-in: %w", err)
	}
	req.IDToken, _ = tok.Extra("id_token").(string)
	if req.IDToken == "" {
		return errors.New("device sign-in: the identity provider gave no ID token (ask for the openid scope)")
	}
	made, err := anon.SignIn().TradeIDToken(cmd.Context(), req)
	if err != nil {
		return fmt.Errorf("sign in to %s: %w", anon.BaseURL(), err)
	}
	return a.save(cmd, anon.BaseURL(), made.Secret, fmt.Sprintf("key %s, expires %s", made.Token.Name, a.when(made.Token.ExpiresAt)))
}

// pasteKey reads an API key from stdin (without echo on a terminal),
// checks it and saves it.
func (a loginCmds) pasteKey(cmd *cobra.Command, url string) error {
	var key string
	if fd, tty := a.terminalFD(cmd.InOrStdin()); tty {
		fmt.Fprint(cmd.ErrOrStderr(), "API key: ")
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return fmt.Errorf("read the key: %w", err)
		}
		key = string(b)
	} else {
		line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 4<<10)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the key from stdin: %w", err)
		}
		key = line
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return usageError{errors.New("no key given: paste one (engrams token create makes one)")}
	}
	return a.save(cmd, url, key, "the pasted key")
}

// save checks key against url and writes both to the config file.
func (a loginCmds) save(cmd *cobra.Command, url, key, what string) error {
	c := client.New(url, key, client.WithHTTPClient(a.opts.HTTPClient), client.WithUserAgent("engrams-cli/"+a.opts.Version))
	me, err := c.People().WhoAmI(cmd.Context())
	if err != nil {
		return fmt.Errorf("check the key: %w", err)
	}
	path, err := configPath(a.opts.Getenv)
	if err != nil {
		return err
	}
	if err := WriteClientConfig(path, c.BaseURL(), key); err != nil {
		return err
	}
	if a.jsonOut {
		return printJSON(cmd.OutOrStdout(), me)
	}
	org := "no organisation"
	if me.OrgID != "" {
		org = me.Role + " in " + me.OrgName
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Signed in as %s (%s); %s, saved to %s\n", orDash(me.Name), org, what, path)
	return nil
}

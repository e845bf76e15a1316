// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the database/sql driver "postgres"

	"github.com/fulfiller-sh/fulfiller/internal/controlplane"
	"github.com/fulfiller-sh/fulfiller/internal/proc"
)

// PostgresBinEnv overrides where the PostgreSQL server binaries (initdb, postgres) are.
const PostgresBinEnv = "FULFILLER_POSTGRES_BIN"

// Postgres is a throw-away PostgreSQL server on loopback, for tests of the pg state backend.
type Postgres struct {
	// Dir holds the data folder, the socket and the log.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// ConnStr connects as the superuser to the database "postgres" (no password: trust
	// authentication on loopback).
	ConnStr string

	proc *controlplane.Process
}

// postgresBin finds the folder with initdb and postgres: PostgresBinEnv, else the newest
// /usr/lib/postgresql/<version>/bin (Debian's layout).
func postgresBin() (string, error) {
	const install = "install them with: apt-get install -y --no-install-recommends postgresql (.ci/run does)"
	if dir := os.Getenv(PostgresBinEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("postgresql server binaries not found in %s=%s: %w; %s", PostgresBinEnv, dir, err, install)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("postgresql server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin or " + PostgresBinEnv + "; " + install)
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// serverCredential is who runs initdb and postgres: both refuse to run as root, so as root
// they run as the "postgres" user (Debian's package creates it), else as the caller.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running postgresql as root needs the unprivileged user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// StartPostgres initialises a database cluster in a new temporary folder and runs a server
// on a free loopback port until Stop. A missing PostgreSQL is an error, never a skip.
func StartPostgres(ctx context.Context) (pg *Postgres, err error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fulfiller-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating postgresql folder: %w", err)
	}
	pg = &Postgres{Dir: dir}
	defer func() {
		if err != nil {
			_ = pg.Stop()
		}
	}()
	data, sockets := filepath.Join(dir, "data"), filepath.Join(dir, "run")
	if err := os.Mkdir(sockets, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, d := range []string{dir, sockets} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("handing %s to the postgres user: %w", d, err)
			}
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, lastBytes(out, 2000))
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return nil, err
	}
	pg.Port = ports[0]
	pg.ConnStr = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.Port)
	pg.proc, err = controlplane.StartProcess("postgres", filepath.Join(bin, "postgres"), dir, cred,
		"-D", data, "-p", strconv.Itoa(pg.Port), "-k", sockets,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "synchronous_commit=off", "-c", "max_connections=100")
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("postgres", pg.ConnStr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if exited, perr := pg.proc.Exited(); exited {
			return nil, fmt.Errorf("postgres exited: %w: %s", proc.WaitError(perr), pg.proc.Tail(2000))
		}
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return pg, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("postgres did not accept connections: %w: %s", err, pg.proc.Tail(2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server and removes its folder.
func (pg *Postgres) Stop() error {
	var err error
	if pg.proc != nil {
		err = pg.proc.Stop(20 * time.Second)
	}
	if rmErr := os.RemoveAll(pg.Dir); err == nil {
		err = rmErr
	}
	return err
}

// CreateDatabase creates a database and returns the superuser's connection string to it, so
// tests sharing a server do not see each other's schemas.
func (pg *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	db, err := sql.Open("postgres", pg.ConnStr)
	if err != nil {
		return "", err
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.Port, name), nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Copyright The fulfiller Authors.
// SPDX-License-Identifier: Apache-2.0

package statelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/lib/pq"
)

// PGConnEnvVar is the environment variable OpenTofu's pg backend reads its connection string
// from. The connection string holds a password: it never goes into -backend-config, which
// tofu writes into .terraform/ and plan files.
const PGConnEnvVar = "PG_CONN_STR"

// pgTable is the pg backend's default table; the fulfiller does not change it.
const pgTable = "states"

// The pg backend keeps every state of a schema as a row (name, data) of one table, the name
// being the OpenTofu workspace. A claim's state is the workspace named after its key, in the
// class's schema: one schema and table for all claims, created by the first run, instead of
// a schema per claim. The backend locks a state with a session-level advisory lock on the
// row's id (ids come from one sequence in the public schema, so they are unique in the
// database), which PostgreSQL releases when the session ends: a killed run leaves no stale
// lock, and there is no force-unlock. `tofu init` runs in the default workspace, which the
// backend creates once as an empty row named "default"; no claim uses it.

// PGBackend is the `-backend-config` of the pg backend for a schema. The connection string
// comes from the runner's environment (PGConnEnv); the claim's workspace is selected by the
// runner (Request.Workspace = the claim's key).
func PGBackend(schema string) map[string]string {
	return map[string]string{"schema_name": schema}
}

// ErrInvalidConnString marks a connection string lib/pq (the pg backend's driver and the
// store's) cannot use as meant. Its messages say what is wrong and never show the value.
var ErrInvalidConnString = errors.New("invalid connection string")

// ValidatePGConnString checks a connection string the way lib/pq reads it: a
// postgres:// (or postgresql://) URL, or key=value pairs. In a URL, a password with a '#', a
// '/' or a '?' that is not percent-encoded cuts the URL short and points lib/pq at a host made
// of a piece of the password; quotes, spaces and the like make it no URL at all. Such
// characters must be percent-encoded: the error names the character and its encoding, never
// the value.
func ValidatePGConnString(conn string) error {
	lower := strings.ToLower(conn)
	scheme, rest, isURL := strings.Cut(conn, "://")
	if !isURL || (!strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://")) {
		if isURL {
			return fmt.Errorf("%w: the URL's scheme must be postgres or postgresql, not %q", ErrInvalidConnString, scheme)
		}
		if _, err := pq.NewConfig(conn); err != nil {
			return fmt.Errorf("%w: it is neither a postgres:// URL nor key=value pairs lib/pq accepts", ErrInvalidConnString)
		}
		return nil
	}
	u, err := url.Parse(conn)
	if err == nil && u.Fragment == "" && !strings.Contains(u.Path, "@") && !strings.Contains(u.RawQuery, "@") {
		if _, err := pq.NewConfig(conn); err != nil {
			return fmt.Errorf("%w: lib/pq does not accept the URL (check its host, port and parameters)", ErrInvalidConnString)
		}
		return nil
	}
	if strings.Contains(conn, "#") {
		return fmt.Errorf("%w: it has a '#', which ends a URL: percent-encode it as %%23", ErrInvalidConnString)
	}
	// Read the user and password up to the last '@', as it was meant.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo := rest[:at]
		for i := 0; i < len(userinfo); i++ {
			c := userinfo[i]
			switch {
			case c == '%' && (i+2 >= len(userinfo) || !isHex(userinfo[i+1]) || !isHex(userinfo[i+2])):
				return fmt.Errorf("%w: the user or password has a '%%' that starts no %%XX escape: write it as %%25", ErrInvalidConnString)
			case c == '/' || c == '?':
				return fmt.Errorf("%w: the user or password has a '%c', which ends a URL's host part: percent-encode it as %%%02X", ErrInvalidConnString, c, c)
			case !userinfoChar(c):
				return fmt.Errorf("%w: the user or password has a character that must be percent-encoded (byte %d of the user and password: %%%02X)", ErrInvalidConnString, i+1, c)
			}
		}
	}
	return fmt.Errorf("%w: it is no valid postgres:// URL; percent-encode the characters of the user, password and database name that are not letters, digits or -._~", ErrInvalidConnString)
}

// userinfoChar reports whether c may stand unencoded in a URL's user and password as Go's
// url.Parse (lib/pq's) reads them.
func userinfoChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:%@", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// PGConnEnv is the environment that gives a run its connection string.
func PGConnEnv(connStr string) map[string]string {
	return map[string]string{PGConnEnvVar: connStr}
}

// PGStore is the pg backend's Store: the rows of Schema's states table in the database
// ConnStr names.
type PGStore struct {
	ConnStr string
	Schema  string
}

var _ Store = PGStore{}

// open opens the database. A connection string lib/pq would misread is refused first: its
// parse errors quote the URL, password and all.
func (s PGStore) open() (*sql.DB, error) {
	if err := ValidatePGConnString(s.ConnStr); err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	db, err := sql.Open("postgres", s.ConnStr)
	if err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	return db, nil
}

func (s PGStore) table() string {
	return pq.QuoteIdentifier(s.Schema) + "." + pq.QuoteIdentifier(pgTable)
}

// missingTable reports an error about a schema or table that does not exist yet: no run has
// configured the backend, so there is no state.
func missingTable(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && (pqErr.Code == "42P01" || pqErr.Code == "3F000")
}

// stateID returns the id of a claim's row, or false when there is none.
func (s PGStore) stateID(ctx context.Context, db *sql.DB, key Key) (int64, bool, error) {
	var id int64
	err := db.QueryRowContext(ctx, "SELECT id FROM "+s.table()+" WHERE name = $1", string(key)).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows) || missingTable(err):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("reading state %s: %w", key, err)
	}
	return id, true, nil
}

// Exists reports whether the claim's workspace has a row (the backend writes an empty state
// when it creates a workspace, and the row stays after a destroy until Remove).
func (s PGStore) Exists(ctx context.Context, key Key) (bool, error) {
	db, err := s.open()
	if err != nil {
		return false, err
	}
	defer func() { _ = db.Close() }()
	_, ok, err := s.stateID(ctx, db, key)
	return ok, err
}

// Remove deletes the claim's row.
func (s PGStore) Remove(ctx context.Context, key Key) error {
	db, err := s.open()
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, "DELETE FROM "+s.table()+" WHERE name = $1", string(key)); err != nil && !missingTable(err) {
		return fmt.Errorf("removing state %s: %w", key, err)
	}
	return nil
}

// LockHolder finds the session holding the advisory lock on the claim's row. The pg backend
// records no LockInfo, so the holder is described by its session: ID "pg-pid-<pid>", Who the
// database user and client address, Info the session's application name, Created the start
// of its current transaction or session. A lock taken while the workspace is being created
// (on a hash of the schema and table) is not attributed to a claim.
func (s PGStore) LockHolder(ctx context.Context, key Key) (*Holder, error) {
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	id, ok, err := s.stateID(ctx, db, key)
	if err != nil || !ok {
		return nil, err
	}
	// A bigint advisory lock key shows in pg_locks as classid (high 32 bits), objid (low 32
	// bits) and objsubid 1.
	const query = `SELECT l.pid, coalesce(a.usename, ''), coalesce(host(a.client_addr), 'local'),
		coalesce(a.application_name, ''), coalesce(a.xact_start, a.backend_start)
	FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	LIMIT 1`
	var (
		pid             int64
		user, addr, app string
		started         sql.NullTime
	)
	err = db.QueryRowContext(ctx, query, int64(uint32(uint64(id)>>32)), int64(uint32(uint64(id)))).Scan(&pid, &user, &addr, &app, &started)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading lock of state %s: %w", key, err)
	}
	h := &Holder{ID: fmt.Sprintf("pg-pid-%d", pid), Who: user + "@" + addr, Info: app}
	if started.Valid {
		h.Created = started.Time.UTC().Truncate(time.Second)
	}
	return h, nil
}

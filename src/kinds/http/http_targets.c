/*-------------------------------------------------------------------------
 *
 * http_targets.c
 *	  outbox.http_allowed_targets: the hosts, address ranges and ports that
 *	  webhook requests may connect to.
 *
 * The setting is a comma-separated list of entries, each a target and an
 * optional port or port range:
 *
 *	 *								anything (the default)
 *	 hooks.example.com:443			a host name, as written in the URL
 *	 *.example.com					any name under example.com
 *	 10.0.0.0/8:8000-8999			an IPv4 address or range
 *	 [fd00::/8]:443, ::1			an IPv6 address or range ([] with a port)
 *	 *:443							any host, on that port
 *
 * An empty list allows nothing. A URL whose host and port match a host
 * entry is allowed by its name. Otherwise every connection the relay opens
 * for it is checked, after name resolution and just before connecting
 * (libcurl's CURLOPT_OPENSOCKETFUNCTION): its address and port must match
 * an address entry. So a name that resolves (or is rebound) to an address
 * outside the list is refused, whatever it resolved to a moment before.
 *
 * The list is parsed once per reload, by the check hook, into a flat
 * malloc'd array (GUC "extra"); the assign hook installs it and bumps a
 * generation number, which the webhook kind uses to stop reusing connections
 * opened under an older list. OutboxTargetAddressAllowed runs inside a
 * libcurl callback: it only reads that array and never allocates or
 * throws.
 *
 * src/kinds/http/http_targets.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "utils/guc.h"

#include "compat.h"
#include "http_targets.h"

typedef enum TargetKind
{
	TARGET_ANY_HOST,
	TARGET_NAME,
	TARGET_SUFFIX,				/* "*.example.com": name holds ".example.com" */
	TARGET_IPV4,
	TARGET_IPV6
} TargetKind;

typedef struct AllowEntry
{
	TargetKind	kind;
	char		name[256];		/* lower case */
	unsigned char addr[16];
	int			prefix;			/* bits */
	int			port_lo;
	int			port_hi;
} AllowEntry;

typedef struct AllowList
{
	int			n;
	AllowEntry entries[FLEXIBLE_ARRAY_MEMBER];
} AllowList;

char	   *outbox_http_allowed_targets = NULL;
static const AllowList *targets = NULL;
static uint64 generation = 0;

/* Parses "port" or "lo-hi" into the entry; false if not 1..65535. */
static bool
parse_ports(const char *s, AllowEntry *e)
{
	char	   *end;
	long		lo;
	long		hi;

	lo = strtol(s, &end, 10);
	hi = lo;
	if (end == s)
		return false;
	if (*end == '-')
	{
		const char *h = end + 1;

		hi = strtol(h, &end, 10);
		if (end == h)
			return false;
	}
	if (*end != '\0' || lo < 1 || hi > 65535 || lo > hi)
		return false;
	e->port_lo = (int) lo;
	e->port_hi = (int) hi;
	return true;
}

/* Whether an IPv6 address is IPv4-mapped (::ffff:a.b.c.d, RFC 4291 2.5.5.2). */
static bool
v4_mapped(const unsigned char *a)
{
	static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(a, prefix, sizeof(prefix)) == 0;
}

/*
 * Parses "address[/prefix]" of family af into the entry. An IPv4-mapped
 * range (::ffff:a.b.c.d/96 and longer) is the IPv4 range it maps: a
 * connection to such an address reaches that IPv4 address, and is judged
 * as one (OutboxTargetAddressAllowed).
 */
static bool
parse_address(char *s, int af, AllowEntry *e)
{
	char	   *slash = strchr(s, '/');
	int			bits = af == AF_INET ? 32 : 128;

	e->prefix = bits;
	if (slash != NULL)
	{
		char	   *end;
		long		p;

		*slash = '\0';
		p = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end != '\0' || p < 0 || p > bits)
			return false;
		e->prefix = (int) p;
	}
	e->kind = af == AF_INET ? TARGET_IPV4 : TARGET_IPV6;
	if (inet_pton(af, s, e->addr) != 1)
		return false;
	if (af == AF_INET6 && e->prefix >= 96 && v4_mapped(e->addr))
	{
		memmove(e->addr, e->addr + 12, 4);
		memset(e->addr + 4, 0, 12);
		e->prefix -= 96;
		e->kind = TARGET_IPV4;
	}
	return true;
}

/* A host name (or "*."-suffix) of letters, digits, '-', '.' and '_'. */
static bool
parse_name(const char *s, AllowEntry *e)
{
	size_t		len = strlen(s);

	if (strcmp(s, "*") == 0)
	{
		e->kind = TARGET_ANY_HOST;
		return true;
	}
	if (strncmp(s, "*.", 2) == 0)
	{
		e->kind = TARGET_SUFFIX;
		s++;
		len--;
	}
	else
		e->kind = TARGET_NAME;
	if (len == 0 || len >= sizeof(e->name))
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
			return false;
		e->name[i] = pg_ascii_tolower((unsigned char) c);
	}
	e->name[len] = '\0';
	return true;
}

/* Parses one entry (trimmed, non-empty, modified in place). */
static bool
parse_entry(char *s, AllowEntry *e)
{
	char	   *port = NULL;
	char	   *colon;

	memset(e, 0, sizeof(*e));
	e->port_lo = 1;
	e->port_hi = 65535;
	if (s[0] == '[')
	{
		char	   *close = strchr(s, ']');

		if (close == NULL || (close[1] != '\0' && close[1] != ':'))
			return false;
		*close = '\0';
		if (close[1] == ':')
			port = close + 2;
		if (port != NULL && !parse_ports(port, e))
			return false;
		return parse_address(s + 1, AF_INET6, e);
	}
	colon = strchr(s, ':');
	if (colon != NULL && strchr(colon + 1, ':') != NULL)
		return parse_address(s, AF_INET6, e);	/* bare IPv6, no port */
	if (colon != NULL)
	{
		*colon = '\0';
		if (!parse_ports(colon + 1, e))
			return false;
	}
	if (strspn(s, "0123456789./") == strlen(s) && strchr(s, '.') != NULL)
		return parse_address(s, AF_INET, e);
	return parse_name(s, e);
}

/*
 * Check hook of outbox.http_allowed_targets: parses the list into *extra
 * (allocated as the GUC machinery of this version requires: see
 * OutboxGucMalloc), or refuses it naming the entry that is wrong.
 */
bool
OutboxTargetsCheckHook(char **newval, void **extra, GucSource source pg_attribute_unused())
{
	char	   *copy = pstrdup(*newval);
	int			n = 1;
	AllowList *list;
	char	   *tok;
	char	   *save = NULL;

	for (const char *c = copy; *c; c++)
		n += *c == ',';
	list = OutboxGucMalloc(offsetof(AllowList, entries) + sizeof(AllowEntry) * n);
	if (list == NULL)
		return false;
	list->n = 0;
	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		char	   *end;

		while (*tok == ' ' || *tok == '\t')
			tok++;
		end = tok + strlen(tok);
		while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (*tok == '\0')
			continue;
		if (!parse_entry(pstrdup(tok), &list->entries[list->n]))
		{
			GUC_check_errdetail("Entry \"%s\" is not a host name, address or range with an optional :port or :port-port.", tok);
			OutboxGucFree(list);
			return false;
		}
		list->n++;
	}
	*extra = list;
	return true;
}

/* Assign hook: installs the parsed list; connections opened before are not reused. */
void
OutboxTargetsAssignHook(const char *newval pg_attribute_unused(), void *extra)
{
	targets = (const AllowList *) extra;
	generation++;
}

/* Bumped whenever the list is assigned (also when its text is unchanged). */
uint64
OutboxTargetsGeneration(void)
{
	return generation;
}

static bool
port_ok(const AllowEntry *e, int port)
{
	return port >= e->port_lo && port <= e->port_hi;
}

/*
 * What the list says about a URL's host (as libcurl gives it: a name, an
 * IPv4 address, or an IPv6 address in brackets) and port: allowed by a
 * host entry, to be decided by the address of each connection, or refused
 * outright (no entry could allow it). May allocate; not for callbacks.
 */
OutboxTargetVerdict
OutboxTargetByName(const char *host, int port)
{
	const AllowList *l = targets;
	bool		addresses = false;
	size_t		len = strlen(host);

	if (l == NULL)
		return OUTBOX_TARGET_ALLOWED;	/* not loaded yet: the default, '*' */
	for (int i = 0; i < l->n; i++)
	{
		const AllowEntry *e = &l->entries[i];

		if (!port_ok(e, port))
			continue;
		switch (e->kind)
		{
			case TARGET_ANY_HOST:
				return OUTBOX_TARGET_ALLOWED;
			case TARGET_NAME:
				if (pg_strcasecmp(host, e->name) == 0)
					return OUTBOX_TARGET_ALLOWED;
				break;
			case TARGET_SUFFIX:
				if (len > strlen(e->name) &&
					pg_strcasecmp(host + len - strlen(e->name), e->name) == 0)
					return OUTBOX_TARGET_ALLOWED;
				break;
			case TARGET_IPV4:
			case TARGET_IPV6:
				addresses = true;
				break;
		}
	}
	return addresses ? OUTBOX_TARGET_CHECK_ADDRESS : OUTBOX_TARGET_REFUSED;
}

/* Whether the first bits of a and b are equal. */
static bool
prefix_match(const unsigned char *a, const unsigned char *b, int bits)
{
	int			bytes = bits / 8;
	int			rest = bits % 8;

	if (memcmp(a, b, bytes) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[bytes] ^ b[bytes]) & (0xff << (8 - rest))) == 0;
}

/*
 * Whether a connection to addr (IPv4 or IPv6, with its port) matches an
 * address entry. Called from a libcurl callback: reads the installed list
 * only, never allocates or throws.
 */
bool
OutboxTargetAddressAllowed(const struct sockaddr *addr)
{
	const AllowList *l = targets;
	const unsigned char *bytes;
	int			port;
	TargetKind	kind;

	if (l == NULL)
		return true;
	if (addr->sa_family == AF_INET)
	{
		const struct sockaddr_in *in = (const struct sockaddr_in *) addr;

		bytes = (const unsigned char *) &in->sin_addr;
		port = ntohs(in->sin_port);
		kind = TARGET_IPV4;
	}
	else if (addr->sa_family == AF_INET6)
	{
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) addr;

		bytes = (const unsigned char *) &in6->sin6_addr;
		port = ntohs(in6->sin6_port);
		kind = TARGET_IPV6;
		/* ::ffff:a.b.c.d reaches a.b.c.d: IPv6 ranges such as ::/0 do not allow it */
		if (v4_mapped(bytes))
		{
			bytes += 12;
			kind = TARGET_IPV4;
		}
	}
	else
		return false;
	for (int i = 0; i < l->n; i++)
	{
		const AllowEntry *e = &l->entries[i];

		if (!port_ok(e, port))
			continue;
		if (e->kind == TARGET_ANY_HOST ||
			(e->kind == kind && prefix_match(bytes, e->addr, e->prefix)))
			return true;
	}
	return false;
}

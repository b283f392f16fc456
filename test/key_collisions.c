/*
 * key_collisions: prints N distinct aggregate ids of 24 printable ASCII
 * bytes that share one value of PostgreSQL's hashtextextended(id, SEED),
 * as a writer attacking 1.1's outbox_key_idx made them.
 *
 *   key_collisions SEED N
 *
 * SEED is the bigint the old index used: hashtextextended(aggregate_type,
 * 0) of the ids' aggregate type. The hash (Bob Jenkins' lookup3, as
 * PostgreSQL's hash_bytes_extended runs it on a little-endian machine)
 * mixes 12 bytes at a time with an invertible step and adds each block to
 * the state before mixing it: two ids whose first blocks differ collide
 * when their second blocks differ by the opposite of what the first
 * blocks' mixing left. So for a random first block, the second is
 * computed; it is kept when all its bytes are printable (about one try
 * in 200,000). The test checks every id against the server's own
 * hashtextextended, so a mistake here fails the test rather than
 * weakening it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_BYTES 24

static uint32_t
rotl(uint32_t x, int k)
{
	return (x << k) | (x >> (32 - k));
}

/* lookup3's mix of the state (a, b, c) */
static void
mix(uint32_t *s)
{
	uint32_t	a = s[0], b = s[1], c = s[2];

	a -= c; a ^= rotl(c, 4); c += b;
	b -= a; b ^= rotl(a, 6); a += c;
	c -= b; c ^= rotl(b, 8); b += a;
	a -= c; a ^= rotl(c, 16); c += b;
	b -= a; b ^= rotl(a, 19); a += c;
	c -= b; c ^= rotl(b, 4); b += a;
	s[0] = a; s[1] = b; s[2] = c;
}

static uint32_t
word(const unsigned char *p)
{
	return p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* xorshift64*: deterministic, so a run can be repeated */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static unsigned char
printable(void)
{
	rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
	return (unsigned char) (0x21 + ((rng * 0x2545F4914F6CDD1DULL) >> 33) % 94);
}

/* The state after the seed and the first block of a 24-byte id. */
static void
after_first_block(uint64_t seed, const unsigned char *id, uint32_t *s)
{
	s[0] = s[1] = s[2] = 0x9e3779b9u + ID_BYTES + 3923095u;
	if (seed != 0)
	{
		s[0] += (uint32_t) (seed >> 32);
		s[1] += (uint32_t) seed;
		mix(s);
	}
	for (int i = 0; i < 3; i++)
		s[i] += word(id + 4 * i);
	mix(s);
}

int
main(int argc, char **argv)
{
	uint64_t	seed;
	long		n;
	unsigned char id[ID_BYTES + 1] = {0};
	uint32_t	s[3];
	uint32_t	target[3];

	if (argc != 3 || (n = atol(argv[2])) < 1)
	{
		fprintf(stderr, "usage: key_collisions SEED N\n");
		return 1;
	}
	seed = (uint64_t) strtoll(argv[1], NULL, 10);

	/* the first id, all random: its state before the second mix is the target */
	for (int i = 0; i < ID_BYTES; i++)
		id[i] = printable();
	after_first_block(seed, id, s);
	for (int i = 0; i < 3; i++)
		target[i] = s[i] + word(id + 12 + 4 * i);
	printf("%s\n", id);

	for (long found = 1; found < n;)
	{
		int			ok = 1;

		for (int i = 0; i < 12; i++)
			id[i] = printable();
		after_first_block(seed, id, s);
		for (int i = 0; i < 3 && ok; i++)
		{
			uint32_t	w = target[i] - s[i];

			for (int j = 0; j < 4 && ok; j++)
			{
				unsigned char ch = (unsigned char) (w >> (8 * j));

				ok = ch >= 0x21 && ch <= 0x7e;
				id[12 + 4 * i + j] = ch;
			}
		}
		if (ok)
		{
			printf("%s\n", id);
			found++;
		}
	}
	return 0;
}

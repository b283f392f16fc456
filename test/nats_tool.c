/*
 * nats_tool: what the JetStream tests and the benchmark ask of a NATS
 * server, through libnats (the same client library the relay uses).
 *
 *   nats_tool ping URL                       JetStream answers (exit 0)
 *   nats_tool add-stream URL NAME SUBJECT REPLICAS DUP_MS [noack] [memory]
 *   nats_tool delete-stream URL NAME
 *   nats_tool info URL NAME                  msgs, last seq, bytes, duplicate window (ms)
 *   nats_tool dump URL NAME [data]           one JSON line per stored message
 *   nats_tool bench URL SUBJECT N BYTES      async publishes with Nats-Msg-Id,
 *                                            prints messages/s when all are acked
 *   nats_tool publish URL SUBJECT MSGID DATA  one JetStream publish with Nats-Msg-Id
 *   nats_tool respond URL SUBJECT ANSWER     answers every request on SUBJECT with
 *                                            ANSWER (a core NATS responder, no stream);
 *                                            prints "ready" once subscribed
 *
 * URL may carry user:password@ (or token@); a tls:// URL is verified with the
 * CA file named by NATS_TOOL_CA. Errors go to stderr with exit status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nats/nats.h>

static natsConnection *nc;
static jsCtx *js;

static void
die(const char *what, natsStatus s, jsErrCode jerr)
{
	const char *text = nats_GetLastError(NULL);

	fprintf(stderr, "%s: %s (error code %d)\n", what,
			text != NULL && text[0] != '\0' ? text : natsStatus_GetText(s), (int) jerr);
	exit(1);
}

static void
connect_to(const char *url)
{
	natsOptions *o;
	natsStatus	s = natsOptions_Create(&o);

	if (s == NATS_OK)
		s = natsOptions_SetURL(o, url);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, 2000);
	if (s == NATS_OK && getenv("NATS_TOOL_CA") != NULL)
	{
		s = natsOptions_SetSecure(o, true);
		if (s == NATS_OK)
			s = natsOptions_LoadCATrustedCertificates(o, getenv("NATS_TOOL_CA"));
	}
	if (s == NATS_OK)
		s = natsConnection_Connect(&nc, o);
	if (s != NATS_OK)
		die("connect", s, 0);
	if ((s = natsConnection_JetStream(&js, nc, NULL)) != NATS_OK)
		die("jetstream", s, 0);
	natsOptions_Destroy(o);
}

static void
json_string(const char *s, int len)
{
	putchar('"');
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int	bench_errors = 0;

static void
bench_error(jsCtx *ctx, jsPubAckErr *pae, void *closure)
{
	bench_errors++;
}

int
main(int argc, char **argv)
{
	natsStatus	s;
	jsErrCode	jerr = 0;
	jsStreamInfo *si = NULL;

	if (argc < 3)
	{
		fprintf(stderr, "usage: nats_tool ping|add-stream|delete-stream|info|dump|bench URL ...\n");
		return 2;
	}
	if (strcmp(argv[1], "bench") == 0)
	{
		jsOptions	jo;
		natsOptions *o;
		int			n = atoi(argv[4]);
		int			bytes = atoi(argv[5]);
		char	   *data = calloc(1, bytes + 1);
		double		t0;

		memset(data, 'x', bytes);
		jsOptions_Init(&jo);
		jo.PublishAsync.ErrHandler = bench_error;
		jo.PublishAsync.MaxPending = 1024;
		natsOptions_Create(&o);
		natsOptions_SetURL(o, argv[2]);
		if ((s = natsConnection_Connect(&nc, o)) != NATS_OK)
			die("connect", s, 0);
		if ((s = natsConnection_JetStream(&js, nc, &jo)) != NATS_OK)
			die("jetstream", s, 0);
		t0 = now();
		for (int i = 0; i < n; i++)
		{
			jsPubOptions po;
			char		id[64];

			jsPubOptions_Init(&po);
			snprintf(id, sizeof(id), "bench-%ld-%d", (long) t0, i);
			po.MsgId = id;
			po.MaxWait = 5000;
			if ((s = js_PublishAsync(js, argv[3], data, bytes, &po)) != NATS_OK)
				die("publish", s, 0);
		}
		if ((s = js_PublishAsyncComplete(js, NULL)) != NATS_OK)
			die("complete", s, 0);
		printf("%.0f\n", n / (now() - t0));
		return bench_errors > 0;
	}

	connect_to(argv[2]);
	if (strcmp(argv[1], "ping") == 0)
	{
		jsAccountInfo *ai = NULL;

		if ((s = js_GetAccountInfo(&ai, js, NULL, &jerr)) != NATS_OK)
			die("account info", s, jerr);
		jsAccountInfo_Destroy(ai);
	}
	else if (strcmp(argv[1], "add-stream") == 0 && argc >= 7)
	{
		jsStreamConfig cfg;
		const char *subjects[1] = {argv[4]};

		jsStreamConfig_Init(&cfg);
		cfg.Name = argv[3];
		cfg.Subjects = subjects;
		cfg.SubjectsLen = 1;
		cfg.Storage = js_FileStorage;
		cfg.Replicas = atoi(argv[5]);
		cfg.Duplicates = (int64_t) atoll(argv[6]) * 1000000;
		for (int i = 7; i < argc; i++)
		{
			if (strcmp(argv[i], "noack") == 0)
				cfg.NoAck = true;
			else if (strcmp(argv[i], "memory") == 0)
				cfg.Storage = js_MemoryStorage;
		}
		if ((s = js_AddStream(&si, js, &cfg, NULL, &jerr)) != NATS_OK)
			die("add stream", s, jerr);
	}
	else if (strcmp(argv[1], "publish") == 0 && argc >= 6)
	{
		jsPubOptions po;
		jsPubAck   *pa = NULL;

		jsPubOptions_Init(&po);
		po.MsgId = argv[4];
		if ((s = js_Publish(&pa, js, argv[3], argv[5], (int) strlen(argv[5]), &po, &jerr)) != NATS_OK)
			die("publish", s, jerr);
		jsPubAck_Destroy(pa);
	}
	else if (strcmp(argv[1], "respond") == 0 && argc >= 5)
	{
		natsSubscription *sub = NULL;

		if ((s = natsConnection_SubscribeSync(&sub, nc, argv[3])) != NATS_OK ||
			(s = natsConnection_Flush(nc)) != NATS_OK)
			die("subscribe", s, 0);
		printf("ready\n");
		fflush(stdout);
		for (;;)
		{
			natsMsg    *m = NULL;

			s = natsSubscription_NextMsg(&m, sub, 60000);
			if (s == NATS_TIMEOUT)
				continue;
			if (s != NATS_OK)
				die("next message", s, 0);
			if (natsMsg_GetReply(m) != NULL)
				natsConnection_PublishString(nc, natsMsg_GetReply(m), argv[4]);
			natsMsg_Destroy(m);
		}
	}
	else if (strcmp(argv[1], "delete-stream") == 0 && argc >= 4)
	{
		if ((s = js_DeleteStream(js, argv[3], NULL, &jerr)) != NATS_OK)
			die("delete stream", s, jerr);
	}
	else if (strcmp(argv[1], "info") == 0 && argc >= 4)
	{
		if ((s = js_GetStreamInfo(&si, js, argv[3], NULL, &jerr)) != NATS_OK)
			die("stream info", s, jerr);
		printf("msgs=%llu last_seq=%llu bytes=%llu duplicates_ms=%lld replicas=%lld\n",
			   (unsigned long long) si->State.Msgs, (unsigned long long) si->State.LastSeq,
			   (unsigned long long) si->State.Bytes,
			   (long long) (si->Config->Duplicates / 1000000), (long long) si->Config->Replicas);
	}
	else if (strcmp(argv[1], "dump") == 0 && argc >= 4)
	{
		bool		with_data = argc >= 5 && strcmp(argv[4], "data") == 0;
		natsSubscription *sub = NULL;
		jsSubOptions so;
		uint64_t	got = 0;

		if ((s = js_GetStreamInfo(&si, js, argv[3], NULL, &jerr)) != NATS_OK)
			die("stream info", s, jerr);
		/* an ephemeral pull consumer without acks reads the stream in order */
		jsSubOptions_Init(&so);
		so.Stream = argv[3];
		so.Config.AckPolicy = js_AckNone;
		so.Config.DeliverPolicy = js_DeliverAll;
		/* in a cluster that just lost a node, creating it can time out a while */
		for (int tries = 0; si->State.Msgs > 0 && tries < 10; tries++)
		{
			s = js_PullSubscribe(&sub, js, si->Config->Subjects[0], NULL, NULL, &so, &jerr);
			if (s != NATS_TIMEOUT)
				break;
		}
		if (si->State.Msgs > 0 && s != NATS_OK)
			die("subscribe", s, jerr);
		while (got < si->State.Msgs)
		{
			natsMsgList list = {0};

			s = natsSubscription_Fetch(&list, sub, 1000, 5000, &jerr);
			if (s != NATS_OK)
				die("fetch", s, jerr);
			for (int k = 0; k < list.Count; k++)
			{
				natsMsg    *m = list.Msgs[k];
				jsMsgMetaData *meta = NULL;
				const char **keys = NULL;
				int			nkeys = 0;

				if ((s = natsMsg_GetMetaData(&meta, m)) != NATS_OK)
					die("metadata", s, 0);
				printf("{\"seq\": %llu, \"subject\": ", (unsigned long long) meta->Sequence.Stream);
				jsMsgMetaData_Destroy(meta);
				json_string(natsMsg_GetSubject(m), strlen(natsMsg_GetSubject(m)));
				printf(", \"headers\": {");
				natsMsgHeader_Keys(m, &keys, &nkeys);
				for (int i = 0; i < nkeys; i++)
				{
					const char *v = NULL;

					natsMsgHeader_Get(m, keys[i], &v);
					printf("%s", i > 0 ? ", " : "");
					json_string(keys[i], strlen(keys[i]));
					printf(": ");
					json_string(v ? v : "", v ? strlen(v) : 0);
				}
				free((void *) keys);
				printf("}, \"bytes\": %d", natsMsg_GetDataLength(m));
				if (with_data)
				{
					printf(", \"data\": ");
					json_string(natsMsg_GetData(m), natsMsg_GetDataLength(m));
				}
				printf("}\n");
				got++;
			}
			natsMsgList_Destroy(&list);
		}
		natsSubscription_Destroy(sub);
	}
	else
	{
		fprintf(stderr, "nats_tool: unknown command or missing arguments\n");
		return 2;
	}
	jsStreamInfo_Destroy(si);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return 0;
}

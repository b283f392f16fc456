/*
 * kafka_mock.c
 *	  Hosts librdkafka's mock Kafka cluster (rdkafka_mock.h) for the tests:
 *	  brokers on 127.0.0.1 that speak the Kafka protocol, with idempotent
 *	  producers, fetches and injected errors. No Kafka broker is
 *	  installable on the test machines; this is the stated stand-in.
 *
 * Usage: kafka_mock BROKERS
 * Prints "bootstraps <host:port,...>" once the cluster listens, then
 * reads commands, one a line, and answers each with "ok" or "error <why>":
 *   topic NAME PARTITIONS        create a topic (replication 3 or fewer)
 *   down BROKER | up BROKER      a broker stops or resumes answering
 *   rtt BROKER MS                a broker's answers are delayed
 *   errors APIKEY CODE [CODE...] the next requests of APIKEY fail so
 *   clear APIKEY                 drop the errors still pushed for APIKEY
 *   quit                         (or end of input) stop
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

int
main(int argc, char **argv)
{
	char		err[512];
	char		line[4096];
	int			brokers = argc > 1 ? atoi(argv[1]) : 3;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mc;

	/* the handle only keeps the cluster's books: its logs are not wanted */
	rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err));
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "rd_kafka_new: %s\n", err);
		return 1;
	}
	mc = rd_kafka_mock_cluster_new(rk, brokers);
	if (mc == NULL)
	{
		fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
		return 1;
	}
	printf("bootstraps %s\n", rd_kafka_mock_cluster_bootstraps(mc));
	fflush(stdout);

	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		char		name[1024];
		int			a, b;
		rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;

		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "topic %1023s %d", name, &a) == 2)
			e = rd_kafka_mock_topic_create(mc, name, a, brokers < 3 ? brokers : 3);
		else if (sscanf(line, "down %d", &a) == 1)
			e = rd_kafka_mock_broker_set_down(mc, a);
		else if (sscanf(line, "up %d", &a) == 1)
			e = rd_kafka_mock_broker_set_up(mc, a);
		else if (sscanf(line, "clear %d", &a) == 1)
			rd_kafka_mock_clear_request_errors(mc, (int16_t) a);
		else if (sscanf(line, "rtt %d %d", &a, &b) == 2)
			e = rd_kafka_mock_broker_set_rtt(mc, a, b);
		else if (strncmp(line, "errors ", 7) == 0)
		{
			rd_kafka_resp_err_t codes[64];
			size_t		n = 0;
			char	   *save = NULL;
			char	   *tok = strtok_r(line + 7, " \n", &save);
			int			apikey = tok ? atoi(tok) : -1;

			while ((tok = strtok_r(NULL, " \n", &save)) != NULL && n < 64)
				codes[n++] = (rd_kafka_resp_err_t) atoi(tok);
			if (apikey < 0 || n == 0)
			{
				printf("error usage: errors APIKEY CODE...\n");
				fflush(stdout);
				continue;
			}
			rd_kafka_mock_push_request_errors_array(mc, (int16_t) apikey, n, codes);
		}
		else
		{
			printf("error unknown command\n");
			fflush(stdout);
			continue;
		}
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			printf("error %s\n", rd_kafka_err2str(e));
		else
			printf("ok\n");
		fflush(stdout);
	}
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	return 0;
}

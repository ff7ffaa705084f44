// End-to-end tests on the throwaway PostgreSQL cluster of the PgCluster ctest fixture.
#pragma once

#include "gtest/gtest.h"
#include "tests/store/pg_test_util.h"

// A fresh schema of the test cluster, or a skip / failure saying why there is none.
#define ROTE_PG_SCHEMA_OR_RETURN(schema)                                                    \
  const store::testing::PgUrl pg_url = store::testing::TestPgUrl();                         \
  if (!pg_url.error.empty()) FAIL() << pg_url.error;                                        \
  if (pg_url.url.empty()) GTEST_SKIP() << "no PostgreSQL cluster: run through ctest, or set " \
                                          "ROTE_TEST_PG_URL (scripts/pg_test_cluster.sh)";  \
  store::testing::PgSchema schema(pg_url.url);                                              \
  if (!schema.error().empty()) FAIL() << schema.error()

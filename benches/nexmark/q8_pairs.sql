-- Nexmark q8 as a join of rows: each person with each auction they opened in the same 10 s
-- window (the standard q8 first takes each side's distinct rows per window: see q8.sql)
CREATE SOURCE person (id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR,
                       city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR,
                       WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE SOURCE auction (id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
                        reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT,
                        category BIGINT, extra VARCHAR,
                        WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q8_pairs AS
  SELECT p.id, p.name, a.reserve, p.window_start, p.window_end
  FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) AS p
  JOIN TUMBLE(auction, date_time, INTERVAL '10' SECOND) AS a
  ON p.id = a.seller AND p.window_start = a.window_start AND p.window_end = a.window_end;

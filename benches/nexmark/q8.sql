-- Nexmark q8: new users who opened an auction in the same 10 s window
CREATE SOURCE person (id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR,
                       city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR,
                       WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE SOURCE auction (id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
                        reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT,
                        category BIGINT, extra VARCHAR,
                        WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q8 AS
  SELECT p.id, p.name, p.starttime AS window_start, p.endtime AS window_end FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end) AS p
  JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end) AS a
  ON p.id = a.seller AND p.starttime = a.starttime AND p.endtime = a.endtime;

-- Nexmark q7: the bids at each window's highest price
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q7 AS
  SELECT window_start, window_end, auction, price, bidder, date_time
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
  WHERE price = (SELECT MAX(price) FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND));
